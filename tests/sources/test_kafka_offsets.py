"""The Kafka source's driver side (offsets, partitions, read limits) and the CLI's Kafka start-up
check, against Apache Kafka and without Spark: the reader is driven directly, as Spark's driver would.

Issue 10, items 2-7.
"""

import logging
import random
import re
import time

import pytest
from harness.cli import run_cli
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    ReadMinRows,
)

from pidquota.conf.errors import ConfigError, PidquotaError
from pidquota.sources.kafka import source as kafka_source
from pidquota.sources.kafka.source import KafkaStreamReader
from pidquota.store.kafka import KafkaError, KafkaUrl


def produce_to(kafka, topic: str, counts: list[int]) -> None:
    """Create ``topic`` with one partition per count; send ``counts[p]`` records to partition p,
    batched (multi-record batches: some brokers under-report their end in ListOffsets)."""
    from kafka import KafkaProducer

    kafka.produce(topic, [], partitions=len(counts))
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=20)
    for p, n in enumerate(counts):
        for i in range(n):
            producer.send(topic, value=f"{topic}-{p}-{i}".encode(), partition=p)
    producer.flush()
    producer.close()


def true_ends(kafka, topic: str) -> dict:
    """The end offset of each partition, counted from the records themselves."""
    ends: dict[str, int] = {}
    for r in kafka.consume(topic):
        ends[str(r.partition)] = max(ends.get(str(r.partition), 0), r.offset + 1)
    return ends


def reader(kafka, topic: str, **options) -> KafkaStreamReader:
    return KafkaStreamReader({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, **options})


def total(start: dict, end: dict) -> int:
    return sum(end[t][p] - start.get(t, {}).get(p, 0) for t in end for p in end[t])


# 2. startingOffsets: Spark's -1 (latest) and -2 (earliest) ---------------------------------------


def test_starting_offsets_minus_one_is_latest_and_minus_two_is_earliest(kafka):
    produce_to(kafka, "conv1", [7, 5, 3])
    ends = true_ends(kafka, "conv1")
    assert ends == {"0": 7, "1": 5, "2": 3}
    given = '{"conv1": {"0": -1, "1": -2, "2": 1}}'
    assert reader(kafka, "conv1", startingOffsets=given).initialOffset() == {
        "conv1": {"0": 7, "1": 0, "2": 1}
    }


@pytest.mark.parametrize(
    "given, named",
    [
        ('{"conv": {"0": -3}}', "-3"),
        ('{"conv": {"0": "5"}}', "'5'"),
        ('{"conv": {"0": 1.5}}', "1.5"),
        ('{"conv": [1, 2]}', "[1, 2]"),
        ("-5", "-5"),
    ],
)
def test_other_negative_or_odd_starting_offsets_are_refused_naming_the_value(kafka, given, named):
    produce_to(kafka, "conv", [7, 5, 3])
    with pytest.raises(PidquotaError, match="startingOffsets .*" + re.escape(named)):
        reader(kafka, "conv", startingOffsets=given).initialOffset()


# 3. partitions that appear after the start ----------------------------------------------------


class Retained:
    """The reader's own client, except that retention has deleted the first ``gone`` offsets
    of every partition (a stand-in kept from the Tansu days, which could not delete records)."""

    def __init__(self, real, gone: int):
        self.real, self.gone = real, gone

    def beginning_offsets(self, tps):
        return {tp: off + self.gone for tp, off in self.real.beginning_offsets(tps).items()}

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_new_partition_is_read_from_its_beginning_offset_as_latest_offset_chose(kafka):
    produce_to(kafka, "grown", [10, 12])
    lenient = reader(kafka, "grown", failOnDataLoss="false")
    lenient._client = Retained(lenient.client, 4)
    start = {"grown": {"0": 2}}  # partition 1 appeared after this start
    end = lenient.latestOffset(start, ReadAllAvailable())
    assert start == {"grown": {"0": 2}}  # Spark's dict is not changed
    assert end == {"grown": {"0": 10, "1": 12}}
    ranges = {r.partition: (r.start, r.end) for r in lenient.partitions(start, end)}
    assert ranges == {0: (2, 10), 1: (4, 12)}  # not from 0: offsets 0..3 are gone


def test_a_new_partition_counts_from_its_beginning_against_the_read_limit(kafka):
    produce_to(kafka, "grown2", [10, 12])
    lenient = reader(kafka, "grown2", failOnDataLoss="false")
    lenient._client = Retained(lenient.client, 4)
    start = {"grown2": {"0": 10}}
    end = lenient.latestOffset(start, ReadMaxRows(5))
    assert end == {"grown2": {"0": 10, "1": 9}}  # 5 rows: 4..8 of the new partition
    ((r),) = lenient.partitions(start, end)
    assert (r.partition, r.start, r.end) == (1, 4, 9)


def test_a_new_partition_that_lost_records_is_data_loss(kafka):
    produce_to(kafka, "grown3", [3, 6])
    strict = reader(kafka, "grown3")
    strict._client = Retained(strict.client, 2)
    with pytest.raises(KafkaError, match=r"data loss: grown3-1 .*offsets 0\.\.1 were deleted"):
        strict.partitions({"grown3": {"0": 3}}, {"grown3": {"0": 3, "1": 6}})


def test_a_new_partition_on_the_broker_is_read_from_its_beginning(kafka):
    produce_to(kafka, "grown4", [4, 6])
    r = reader(kafka, "grown4")
    start = {"grown4": {"0": 4}}
    end = r.latestOffset(start, ReadAllAvailable())
    assert [(p.partition, p.start, p.end) for p in r.partitions(start, end)] == [(1, 0, 6)]


# 4. read limits ------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [1, 2, 3, 5, 29])
def test_read_max_rows_is_never_exceeded_and_always_makes_progress(kafka, budget):
    topic = f"limits{budget}"
    produce_to(kafka, topic, [10, 10, 10])
    r = reader(kafka, topic)
    start = r.initialOffset()
    seen = 0
    while True:
        end = r.latestOffset(start, ReadMaxRows(budget))
        n = total(start, end)
        assert n <= budget
        if end == start:
            break
        assert n >= 1
        seen, start = seen + n, end
    assert seen == 30 and start == {topic: {"0": 10, "1": 10, "2": 10}}


def test_the_budget_is_split_in_proportion_and_in_full():
    rng = random.Random(5)
    for _ in range(2000):
        avail = {("t", str(p)): rng.choice([0, 1, 2, 7, 100, 10_000]) for p in range(rng.randint(1, 12))}
        budget = rng.randint(1, 500)
        take = kafka_source.share(avail, budget)
        assert sum(take.values()) == min(budget, sum(avail.values()))
        assert all(0 <= take[k] <= avail[k] for k in avail)
        if sum(avail.values()) > budget:  # each at least its share rounded down
            assert all(take[k] >= budget * avail[k] // sum(avail.values()) for k in avail)


def test_available_now_respects_the_engine_limit_and_stops_at_its_target(kafka):
    produce_to(kafka, "avail", [20, 20])
    r = reader(kafka, "avail")  # no maxOffsetsPerTrigger: the limit comes from the engine only
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    produce_to(kafka, "avail", [5, 5])  # after the target: not for this run
    batches = []
    while (end := r.latestOffset(start, ReadMaxRows(15))) != start:
        batches.append(total(start, end))
        start = end
    assert max(batches) <= 15 and sum(batches) == 40
    assert start == {"avail": {"0": 20, "1": 20}}


def test_available_now_with_read_all_available_reads_to_the_target_at_once(kafka):
    produce_to(kafka, "avail2", [20, 20])
    r = reader(kafka, "avail2", maxOffsetsPerTrigger="7")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    assert r.latestOffset(start, ReadAllAvailable()) == {"avail2": {"0": 20, "1": 20}}
    assert total(start, r.latestOffset(start, ReadMaxRows(7))) == 7


def test_read_min_rows_waits_for_enough_but_available_now_still_finishes(kafka):
    produce_to(kafka, "minrows", [3, 3])
    r = reader(kafka, "minrows")
    start = r.initialOffset()
    assert r.latestOffset(start, ReadMinRows(10)) == start  # 6 < 10: wait for more
    assert r.latestOffset(start, ReadMinRows(6)) == {"minrows": {"0": 3, "1": 3}}
    r.prepareForTriggerAvailableNow()
    assert r.latestOffset(start, ReadMinRows(10)) == {"minrows": {"0": 3, "1": 3}}  # no waiting forever


@pytest.mark.parametrize("limit", [ReadMaxBytes(1000), ReadMaxFiles(3), ReadMaxRows(0)])
def test_a_limit_the_source_cannot_honour_is_refused_by_name(kafka, limit):
    topic = f"odd-{type(limit).__name__}-{getattr(limit, 'max_rows', '')}"
    produce_to(kafka, topic, [3])
    r = reader(kafka, topic)
    with pytest.raises(KafkaError, match=type(limit).__name__):
        r.latestOffset(r.initialOffset(), limit)


# 5. gaps skipped with failOnDataLoss=false are logged -----------------------------------------


def test_a_skipped_gap_is_a_warning_naming_partition_and_offsets(kafka, caplog):
    produce_to(kafka, "gaps", [3])
    lenient = reader(kafka, "gaps", failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="pidquota.kafka"):
        assert lenient.partitions({"gaps": {"0": 50}}, {"gaps": {"0": 3}}) == []
        lenient.latestOffset({"gaps": {"0": 0, "7": 4}}, ReadAllAvailable())
    # pidquota's own: kafka-python's client may warn too (a connection to the test broker dropped)
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "pidquota.kafka"
    ]
    assert len(warnings) == 2, warnings
    assert "gaps-0" in warnings[0] and "50" in warnings[0] and "3" in warnings[0]
    assert "gaps-7" in warnings[1] and "offset 4" in warnings[1]
    assert all("fail.on.data.loss" in w for w in warnings)


# 6. one driver client across triggers, exact ends, a bounded wait ----------------------------


def test_end_offsets_stay_exact_across_triggers_on_one_client(kafka, monkeypatch):
    produce_to(kafka, "triggers", [0, 0, 0])
    r = reader(kafka, "triggers")
    start = r.initialOffset()
    r.latestOffset(start, ReadAllAvailable())
    made = []
    real = kafka_source.consumer
    monkeypatch.setattr(kafka_source, "consumer", lambda *a, **k: made.append(1) or real(*a, **k))
    for round_ in range(1, 6):
        for _ in range(2):  # idle: the same end again
            t0 = time.monotonic()
            assert r.latestOffset(start, ReadAllAvailable()) == {
                "triggers": dict.fromkeys("012", 25 * (round_ - 1))
            }
            assert time.monotonic() - t0 < 2
        produce_to(kafka, "triggers", [25, 25, 25])  # one multi-record batch each
        assert r.latestOffset(start, ReadAllAvailable()) == {"triggers": dict.fromkeys("012", 25 * round_)}
    assert made == []  # no new client per trigger


class Silent:
    """A client whose fetches never answer: no high watermark ever arrives."""

    def __init__(self, real):
        self.real = real

    def poll(self, timeout_ms=0, **kwargs):
        time.sleep(timeout_ms / 1000)
        return {}

    def highwater(self, tp):
        return None

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_the_high_watermark_wait_is_bounded_by_the_request_timeout(kafka, caplog):
    produce_to(kafka, "silent", [4])
    r = reader(kafka, "silent", requestTimeoutMs="1000")
    r._client = Silent(r.client)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="pidquota.kafka"):
        ends = r.latestOffset({"silent": {"0": 0}}, ReadAllAvailable())
    assert 0.9 < time.monotonic() - t0 < 3
    assert ends["silent"]["0"] >= 1  # ListOffsets' answer, a safe lower bound
    assert any("silent-0" in m and "1 s" in m for m in caplog.messages)


# 7. the broker address: a default port, and a start-up check before Spark ---------------------


def test_the_port_defaults_to_9092():
    assert KafkaUrl.parse("kafka://localhost/events").bootstrap == "localhost:9092"
    assert KafkaUrl.parse("kafka://a,b:9093/events").bootstrap == "a:9092,b:9093"
    assert KafkaUrl.parse("kafka://[::1]/events").bootstrap == "[::1]:9092"
    for bad in ("kafka://h:x/events", "kafka://h:0/events", "kafka://h:70000/events", "kafka://h,/events"):
        with pytest.raises(ConfigError, match="defaults to 9092"):
            KafkaUrl.parse(bad)


def test_a_checkpoint_s_cluster_matches_with_or_without_the_default_port():
    from pidquota.cli.checkpoints import Source

    assert Source.of("kafka://localhost/events").bootstrap() == {"localhost:9092"}
    assert Source.of("kafka://b1,b2:9093/events").bootstrap() == {"b1:9092", "b2:9093"}


@pytest.mark.e2e
def test_an_unreachable_broker_is_one_line_at_start_up_before_spark(tmp_path):
    t0 = time.monotonic()
    r = run_cli(
        *("run", "--input", "kafka://127.0.0.1:1/events", "--once"),
        timeout=120,
        cwd=tmp_path,
        # were Spark to start, it would stop at once on this JAVA_HOME, with another message
        env={"JAVA_HOME": "/nonexistent-jdk"},
    )
    took = time.monotonic() - t0
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("pidquota: error: ") and "127.0.0.1:1" in r.stderr
    assert took < 15
    assert not (tmp_path / "pidquota-out").exists()


def test_a_missing_topic_or_bad_starting_offsets_fail_at_start_up(kafka, tmp_path, capsys, no_spark):
    from pidquota.cli.main import main

    produce_to(kafka, "there", [1])
    out = ["--output", str(tmp_path / "out"), "--once"]
    assert main(["run", "--input", f"kafka://{kafka.bootstrap}/not-there", *out]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"pidquota: error: topic 'not-there' does not exist on {kafka.bootstrap}"
    assert main(["run", "--input", f"kafka://{kafka.bootstrap}/there,zzz*", *out]) == 2
    assert capsys.readouterr().err.strip() == f"pidquota: error: no topic on {kafka.bootstrap} matches 'zzz*'"
    bad = ["--starting-offsets", '{"there": {"0": -7}}']
    assert main(["run", "--input", f"kafka://{kafka.bootstrap}/there", *bad, *out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pidquota: error: ") and "-7" in err and len(err.splitlines()) == 1
    assert main(["run", "--input", f"kafka://{kafka.bootstrap}/there", *out]) == 2
    assert capsys.readouterr().err.strip() == "pidquota: error: Spark would start here"


def test_a_password_in_a_kafka_url_is_refused_without_echoing_it():
    from pidquota.store.kafka import KafkaUrl

    with pytest.raises(ConfigError) as err:
        KafkaUrl.parse("kafka://user:s3cret@localhost/events")
    assert "s3cret" not in str(err.value) and "pidquota.kafka.sasl.username" in str(err.value)
