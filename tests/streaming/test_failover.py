"""A lost leader, on a 3-broker Apache Kafka cluster (KRaft, every node a broker and a voter).

KIP-936 names its own limit: "if leadership changed the new leader will start throttle from
zero". pidquota sees the whole cluster, so it must not share it. A crash-looping user is
throttled; the leader of its partition is killed with -9 mid-run and later restarted; its
throttling carries on with nothing reset, read from every broker's request log (followed live)
and from the data topic itself (the log audit). pidquota's own Kafka source and its
exactly-once output ride through the same loss, with nothing lost and nothing sent twice.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from harness.clients import Record, kafka_python_loop
from harness.kafka import ApacheKafka, read_committed

from pidquota.conf.loader import load
from pidquota.quota import StaticQuotas
from pidquota.store.kafka import KafkaUrl
from pidquota.streaming import query as q
from pidquota.streaming.outputs.kafka import KafkaDataSource
from pidquota.streaming.outputs.reader import read_output
from pidquota.streaming.outputs.sink import JsonlSink
from pidquota.traffic.generator import TrafficGenerator

pytestmark = [pytest.mark.kafka]

QUOTAS = {"User:crash-loop": 4, "<default>": 100}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    broker = ApacheKafka(tmp_path_factory.mktemp("kafka-3"), size=3, heap="384m")
    broker.start()
    yield broker
    broker.stop()


def create(cluster, topic: str, partitions: int = 1) -> None:
    from kafka.admin import NewTopic

    admin = cluster.admin()
    try:
        admin.create_topics([NewTopic(topic, partitions, 3)])
    finally:
        admin.close()


def leader(cluster, topic: str, partition: int = 0):
    """The node that leads ``topic``'s partition now."""
    admin = cluster.admin()
    try:
        (described,) = admin.describe_topics([topic])
    finally:
        admin.close()
    (part,) = [p for p in described["partitions"] if p["partition_index"] == partition]
    return next(n for n in cluster.nodes if n.node_id == part["leader_id"])


def until_decided(query, out, record: Record, timeout_s: float = 180) -> None:
    """Wait until every PID in ``record`` has its decision. Not ``processAllAvailable``: three
    brokers log their replicas' Fetch requests all the time, so the logs never stop growing."""
    import time

    deadline = time.monotonic() + timeout_s
    want = {pid for _, _, pid, _ in record.inits}
    while time.monotonic() < deadline:
        assert query.isActive, query.exception()
        decided = read_output(out, "decisions")
        if not decided.empty and want <= set(decided["producer_id"]):
            return
        time.sleep(0.5)
    raise AssertionError(f"no decision within {timeout_s:g} s for some of {sorted(want)}")


def _verdicts(frame) -> list[tuple]:
    return sorted(map(tuple, frame[["principal", "producer_id", "verdict"]].itertuples(index=False)))


def test_a_lost_leader_resets_no_throttle(cluster, spark, make_enforcer, tmp_path):
    create(cluster, "loop")
    record = Record()
    live = make_enforcer(tmp_path / "live", QUOTAS, **{"pidquota.input.format": "kafka-request-log"})
    query = live.follow(cluster.cluster.logs)
    try:
        kafka_python_loop(cluster, record, "crash-loop", restarts=6, topic="loop")
        until_decided(query, live.out, record)
        lost = leader(cluster, "loop")
        cluster.cluster.kill(lost)  # kill -9 the crash loop's partition leader, mid-run
        kafka_python_loop(cluster, record, "crash-loop", restarts=4, topic="loop")
        until_decided(query, live.out, record)
        cluster.cluster.start_node(lost)  # back, on its own storage
        kafka_python_loop(cluster, record, "crash-loop", restarts=2, topic="loop")
        until_decided(query, live.out, record)
    finally:
        query.stop()

    got = read_output(live.out, "decisions")
    expected = make_enforcer(tmp_path / "events", QUOTAS).run(record.events())
    assert _verdicts(got) == _verdicts(expected["decisions"])
    pids = [pid for _, _, pid, _ in record.inits]
    verdict = dict(zip(got["producer_id"], got["verdict"], strict=True))
    assert [verdict[p] for p in pids] == ["ADMIT"] * 4 + ["THROTTLE"] * 8  # nothing reset by the kill

    audit = make_enforcer(
        tmp_path / "audit",
        QUOTAS,
        **{"pidquota.input.format": "record-batches", "pidquota.audit.owners": _owners(tmp_path)},
    ).run_kafka(f"kafka://{cluster.bootstrap}/loop")["decisions"]
    by_pid = dict(zip(audit["producer_id"], audit["verdict"], strict=True))
    assert [by_pid[p] for p in pids] == ["ADMIT"] * 4 + ["THROTTLE"] * 8


def _owners(tmp_path) -> str:
    path = tmp_path / "owners.json"
    path.write_text(json.dumps({"topics": {"loop": "User:crash-loop"}}))
    return str(path)


def _rows(frame) -> list[tuple]:
    """Decisions as (principal, PID, event time, verdict), sorted: a throttled PID is decided
    at each of its requests, so a PID may have many."""
    return sorted(
        map(tuple, frame[["principal", "producer_id", "timestamp", "verdict"]].itertuples(index=False))
    )


def test_the_kafka_source_and_the_exactly_once_sink_ride_through_a_lost_broker(
    cluster, spark, make_enforcer, tmp_path
):
    gen = TrafficGenerator(seed=21, rate=20)
    _, lines, keys = gen.keyed_events(gen.start_ms + 6 * 60_000)
    thirds = [len(lines) // 3, 2 * len(lines) // 3]
    create(cluster, "events3", 3)
    create(cluster, "dec3", 3)
    cluster.produce("events3", lines[: thirds[0]], keys[: thirds[0]])

    config = load(overrides={"pidquota.spark.shuffle.partitions": "2"}, environ={})
    spark.dataSource.register(KafkaDataSource)
    source = q.kafka_source(spark, KafkaUrl.parse(f"kafka://{cluster.bootstrap}/events3"), config, screen=256)
    out = tmp_path / "out"
    # kafka-python waits up to a request timeout on the lost node before it gives up on a step:
    # 10 s here, not the default 30 s, to keep the test short
    kafka = {
        "kafka.bootstrap.servers": cluster.bootstrap,
        "decisionsTopic": "dec3",
        "requestTimeoutMs": "10000",
    }
    sink = JsonlSink(out, kafka=kafka)
    query = q.start(q.enforcer(source, config, StaticQuotas(QUOTAS)), sink, str(out / "_ck"), False, 500)
    try:
        query.processAllAvailable()
        # kill -9, mid-run, the sink's transaction coordinator (the leader of the one partition
        # of __transaction_state), which also leads one of the input's three partitions
        lost = leader(cluster, "__transaction_state")
        assert lost in [leader(cluster, "events3", p) for p in range(3)]
        cluster.cluster.kill(lost)
        cluster.produce("events3", lines[thirds[0] : thirds[1]], keys[thirds[0] : thirds[1]], create=False)
        query.processAllAvailable()
        cluster.cluster.start_node(lost)
        cluster.produce("events3", lines[thirds[1] :], keys[thirds[1] :], create=False)
        query.processAllAvailable()
        assert query.isActive, query.exception()
    finally:
        query.stop()
        sink.close()

    metrics, decisions = read_output(out, "metrics"), read_output(out, "decisions")
    assert metrics.events.sum() == len(lines)  # nothing lost, nothing read twice
    straight = make_enforcer(tmp_path / "straight", QUOTAS).run(lines)["decisions"]
    assert _rows(decisions) == _rows(straight)  # as if no broker had been lost
    assert (decisions.verdict == "THROTTLE").any() and len(decisions) > 100
    sent = pd.DataFrame(map(json.loads, read_committed(cluster, "dec3")))
    assert _rows(sent) == _rows(decisions)  # in Kafka once each, read committed
