"""The log audit through the real query, against Apache Kafka, with real clients that no
one here wrote: crash-looping idempotent producers on kafka-python and on confluent-kafka
(librdkafka, its batches compressed with gzip, snappy, lz4 and zstd), a steady producer, and
a transactional one that commits and re-inits. Read with `--input-format record-batches`
from a topic pattern, the crash loop's owner is throttled and the steady one never is, and the
producer ids the audit counted are those the broker itself lists (DescribeProducers)."""

import json

import pytest
from harness.clients import ConfluentProducer

from pidquota.formats.record_batches import CONTROL_BATCH
from pidquota.store.kafka import producer
from pidquota.traffic import clients

TOPICS = ("audit-crash-kp", "audit-crash-ck", "audit-steady", "audit-txn")
CODECS = ("gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def sent(kafka) -> dict:
    """The real clients' traffic, once for the module."""
    return _traffic(kafka)


@pytest.fixture
def owners(tmp_path):
    path = tmp_path / "owners.json"
    path.write_text(json.dumps({"topics": {"audit-crash-*": "User:crash", "audit-steady": "User:steady"}}))
    return path


def _traffic(kafka) -> dict:
    for topic in TOPICS:
        kafka.produce(topic, [], partitions=1)
    options = {"kafka.bootstrap.servers": kafka.bootstrap}
    kp = clients.crash_loop(lambda: producer(options, linger_ms=0), "audit-crash-kp", restarts=6, records=3)
    codecs = iter(CODECS * 2)
    ck = clients.crash_loop(
        lambda: ConfluentProducer(kafka.bootstrap, next(codecs), pad=2000),
        "audit-crash-ck",
        restarts=6,
        records=3,
        pid_of=lambda p: None,
    )
    steady = clients.steady(lambda: producer(options, linger_ms=0), "audit-steady", batches=5, records=3)
    txn_pids = []
    for _ in range(2):  # the same transactional.id twice: the same PID, its epoch bumped
        p = producer(options, transactional_id="audit-tx", linger_ms=0)
        p.init_transactions()
        p.begin_transaction()
        p.send("audit-txn", value=b'{"n":1}')
        p.commit_transaction()
        txn_pids.append(clients.kafka_python_pid(p))
        p.close()
    return {
        "kp": kp,
        "ck": ck,
        "steady": steady,
        "txn": txn_pids,
        "codecs": _codecs(kafka.bootstrap, "audit-crash-ck"),
    }


def _codecs(bootstrap: str, topic: str) -> set[int]:
    """The compression codecs of a topic's batches, from their headers (Spark-free)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pidquota.sources.kafka.fetch import read_range
    from pidquota.sources.kafka.source import KafkaStreamReader, _lost

    reader = KafkaStreamReader({"kafka.bootstrap.servers": bootstrap, "subscribe": topic})
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    found = set()
    for part in reader.partitions(start, end):
        for headers in read_range(part, _lost, what="headers"):
            found |= {a & 7 for a in headers.column("attributes").to_pylist()}
    reader.stop()
    return found


def test_the_audit_throttles_the_crash_loops_owner_and_never_the_steady_one(
    kafka, make_enforcer, tmp_path, sent, owners
):
    assert len(set(sent["kp"].pids)) == 6 and len(sent["steady"].pids) == 1
    assert sent["txn"][0] == sent["txn"][1]  # a re-init keeps the PID
    assert sent["codecs"] == {1, 2, 3, 4}  # gzip, snappy, lz4 and zstd batches, none decompressed
    runner = make_enforcer(
        tmp_path / "run",
        {"User:crash": 4, "<default>": 100},
        **{"pidquota.input.format": "record-batches", "pidquota.audit.owners": str(owners)},
    )
    out = runner.run_kafka(f"kafka://{kafka.bootstrap}/audit-*")
    d = out["decisions"]
    crash = d[d["principal"] == "User:crash"]
    assert set(sent["kp"].pids) <= set(crash["producer_id"])
    assert crash["producer_id"].nunique() == 12  # 6 kafka-python and 6 librdkafka restarts: 12 PIDs
    assert (crash["verdict"] == "THROTTLE").any()
    steady = d[d["principal"] == "User:steady"]
    assert list(steady["producer_id"]) == sent["steady"].pids and (steady["verdict"] == "ADMIT").all()
    txn = d[d["principal"] == "Topic:audit-txn"]
    assert list(txn["producer_id"]) == [sent["txn"][0]]  # decided once, though re-inited
    skipped = dict(zip(out["skipped"]["what"], out["skipped"]["count"], strict=True))
    assert skipped[CONTROL_BATCH] == 2  # the two commit markers
    assert out["dead-letters"].empty

    # The broker's own view (DescribeProducers, KIP-664): the producers each partition leader
    # holds are exactly the PIDs the audit counted for the topics of each principal.
    counted = d.groupby("principal").producer_id.apply(set).to_dict()
    assert _active_producers(kafka, ["audit-crash-kp", "audit-crash-ck"]) == counted["User:crash"]
    assert _active_producers(kafka, ["audit-steady"]) == counted["User:steady"]
    assert _active_producers(kafka, ["audit-txn"]) == counted["Topic:audit-txn"]


def _active_producers(kafka, topics: list[str]) -> set[int]:
    """Every producer id the leaders of ``topics`` (one partition each) hold state for, as
    DescribeProducers says."""
    from kafka import TopicPartition

    admin = kafka.admin()
    try:
        states = admin.describe_producers([TopicPartition(t, 0) for t in topics])
    finally:
        admin.close()
    return {s.producer_id for state in states.values() for s in state.active_producers}


def test_recommend_reads_the_audit_too(kafka, spark, sent, owners):
    from pidquota.conf.loader import load
    from pidquota.recommend import job as recommend_job

    config = load(
        overrides={
            "pidquota.spark.shuffle.partitions": "2",
            "pidquota.input.format": "record-batches",
            "pidquota.audit.owners": str(owners),
        },
        environ={},
    )
    stats, what_if = recommend_job.compute(
        f"kafka://{kafka.bootstrap}/audit-*", config, {"User:crash": 4, "<default>": 100}
    )
    new = dict(zip(stats["principal"], stats["max"], strict=True))
    assert new["User:crash"] == 12 and new["User:steady"] == 1 and new["Topic:audit-txn"] == 1
    throttled = dict(zip(what_if["principal"], what_if["throttles"], strict=True))
    assert throttled["User:crash"] > 0 and throttled.get("User:steady", 0) == 0
