"""The Kafka source's driver side (offsets, partitions, read limits) and the CLI's Kafka start-up
check, against Tansu and without Spark: the reader is driven directly, as Spark's driver would.

Issue 10, items 2-7.
"""

import logging
import re
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
)

from conf.errors import ConfigError, PidquotaError
from store.kafka import KafkaUrl
from streaming.kafka_source import KafkaStreamReader

ROOT = Path(__file__).resolve().parents[2]


def produce_to(kafka, topic: str, counts: list[int]) -> None:
    """Create ``topic`` with one partition per count; send ``counts[p]`` records to partition p,
    batched (Tansu's ListOffsets under-reports the end of a multi-record batch)."""
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


# 5. gaps skipped with failOnDataLoss=false are logged -----------------------------------------


def test_a_skipped_gap_is_a_warning_naming_partition_and_offsets(kafka, caplog):
    produce_to(kafka, "gaps", [3])
    lenient = reader(kafka, "gaps", failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="pidquota.kafka"):
        assert lenient.partitions({"gaps": {"0": 50}}, {"gaps": {"0": 3}}) == []
        lenient.latestOffset({"gaps": {"0": 0, "7": 4}}, ReadAllAvailable())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "gaps-0" in warnings[0] and "50" in warnings[0] and "3" in warnings[0]
    assert "gaps-7" in warnings[1] and "offset 4" in warnings[1]
    assert all("fail.on.data.loss" in w for w in warnings)


# 7. the broker address: a default port, and a start-up check before Spark ---------------------


def test_the_port_defaults_to_9092():
    assert KafkaUrl.parse("kafka://localhost/events").bootstrap == "localhost:9092"
    assert KafkaUrl.parse("kafka://a,b:9093/events").bootstrap == "a:9092,b:9093"
    assert KafkaUrl.parse("kafka://[::1]/events").bootstrap == "[::1]:9092"
    for bad in ("kafka://h:x/events", "kafka://h:0/events", "kafka://h:70000/events", "kafka://h,/events"):
        with pytest.raises(ConfigError, match="defaults to 9092"):
            KafkaUrl.parse(bad)


def test_a_checkpoint_s_cluster_matches_with_or_without_the_default_port():
    from streaming.preflight import Source

    assert Source.of("kafka://localhost/events").bootstrap() == {"localhost:9092"}
    assert Source.of("kafka://b1,b2:9093/events").bootstrap() == {"b1:9092", "b2:9093"}
