"""A lost leader, on a 3-broker Apache Kafka cluster (KRaft, every node a broker and a voter).

KIP-936 names its own limit: "if leadership changed the new leader will start throttle from
zero". pidquota sees the whole cluster, so it must not share it. A crash-looping user is
throttled; the leader of its partition is killed with -9 mid-run and later restarted; its
throttling carries on with nothing reset, read from every broker's request log (followed live)
and from the data topic itself (the log audit).
"""

from __future__ import annotations

import json

import pytest
from harness.clients import Record, kafka_python_loop
from harness.kafka import ApacheKafka

from pidquota.streaming.outputs.reader import read_output

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
