"""The request-log input on Apache Kafka's own request log, with real clients.

A broker whose ``kafka.request.logger`` is at WARN, as Kafka ships it, writes no line; turned
on with no restart (IncrementalAlterConfigs on the BROKER_LOGGER resource, what
``kafka-configs.sh --entity-type broker-loggers`` sends), it writes one per request. A live
query follows its logs folder while the file grows and rolls (here every 64 KB, beside every
hour), and decides exactly as the JSON events of the clients' own record of their producer ids
do: kafka-python and librdkafka crash loops, a steady producer, a transactional producer that
re-inits (same PID, epoch bumped), and a user refused by an ACL (``producerId`` -1, counted).

Every INIT_PRODUCER_ID line the broker writes has a shape (API version, idempotent or
transactional, error code, client software) found in the corpus taken from Apache Kafka's own
output (``tests/sources/data/``), where each line is checked against its own JSON. Apache
Kafka 3.9.1 (log4j 1, configured as docs/real-cluster.md says) has a corpus of its own, with
the transactional init it refused while its coordinator loaded (error 14).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from harness.clients import ConfluentProducer, Record, kafka_python_loop
from harness.kafka import ApacheKafka

from pidquota.formats.request_log import REFUSED, Options, RequestLogJudge
from pidquota.store.kafka import producer
from pidquota.streaming.outputs.reader import read_output
from pidquota.traffic.clients import kafka_python_pid

pytestmark = [pytest.mark.kafka]

DATA = Path(__file__).resolve().parent / "data"
CORPUS = sorted(DATA.glob("request-log-apache-kafka-*.log"))
QUOTAS = {"User:crash-loop": 4, "User:per-batch": 3, "<default>": 100}
FORMAT = {"pidquota.input.format": "kafka-request-log"}


def _log4j2_off_and_rolling(tmp: Path) -> Path:
    """docker/kafka/log4j2.yaml with the request logger at WARN (Kafka's shipped level) and a
    roll every 64 KB besides every hour, so that the test sees the file roll."""
    import kafka_broker

    text = kafka_broker.LOG4J2.read_text()
    changed = text.replace("        level: DEBUG\n", "        level: WARN\n")
    changed = changed.replace(
        'kafka-request.log.%d{yyyy-MM-dd-HH}"', 'kafka-request.log.%d{yyyy-MM-dd-HH}-%i"'
    )
    changed = changed.replace(
        "        TimeBasedTriggeringPolicy:\n          modulate: true\n          interval: 1\n",
        "        Policies:\n          TimeBasedTriggeringPolicy:\n            modulate: true\n"
        "            interval: 1\n          SizeBasedTriggeringPolicy:\n            size: 64 KB\n",
    )
    assert changed.count("WARN") == 1 and "SizeBased" in changed and "-%i" in changed, "log4j2.yaml moved"
    path = tmp / "log4j2.yaml"
    path.write_text(changed)
    return path


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("request-log-kafka")
    broker = ApacheKafka(tmp / "kafka", log4j2=_log4j2_off_and_rolling(tmp))
    broker.start()
    yield broker
    broker.stop()


def shape(line: str) -> tuple:
    """What makes one INIT_PRODUCER_ID line differ from another: API version, idempotent or
    transactional, granted or the error, and the client's software."""
    doc = json.loads(re.search(r"Completed request:(\{.*\}) \(", line).group(1))
    software = (doc.get("clientInformation") or {}).get("softwareName", "")
    return (
        doc["requestHeader"]["requestApiVersion"],
        doc["request"].get("transactionalId") is not None,
        doc["response"]["errorCode"],
        software,
    )


def _librdkafka_loop(broker, record: Record, user: str, restarts: int) -> None:
    for _ in range(restarts):
        at = int(time.time() * 1000)
        p = ConfluentProducer(
            broker.sasl_bootstrap,
            **{
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN",
                "sasl.username": user,
                "sasl.password": broker.cluster.users[user],
                "client.id": f"{user}-app",
            },
        )
        p.send("rl-traffic", value=b'{"n":1}')
        p.flush()
        record.add(f"User:{user}", p.pid(), at=at)
        p.close()


def _steady(broker, record: Record) -> None:
    at = int(time.time() * 1000)
    p = producer(broker.sasl("steady"), linger_ms=0, client_id="steady-app")
    for _ in range(5):
        p.send("rl-traffic", value=b'{"n":1}')
        p.flush()
    record.add("User:steady", kafka_python_pid(p), at=at)
    p.close()


def _transactional(broker, record: Record) -> None:
    for epoch in range(2):  # the same transactional.id twice: the same PID, its epoch bumped
        at = int(time.time() * 1000)
        p = producer(broker.sasl("alice"), transactional_id="rl-orders", linger_ms=0, client_id="orders-app")
        p.init_transactions()
        p.begin_transaction()
        p.send("rl-traffic", value=b'{"n":1}')
        p.commit_transaction()
        record.add("User:alice", kafka_python_pid(p), epoch=epoch, at=at)
        p.close()


def _refused(broker) -> None:
    """Inits an ACL refuses, so the broker logs ``producerId`` -1. With no ACL on the Cluster, a
    resource with none is open to all (``allow.everyone.if.no.acl.found``) and IDEMPOTENT_WRITE
    on it grants an idempotent init whatever the topics' ACLs: User:bob is denied both (error
    31, CLUSTER_AUTHORIZATION_FAILED). User:carol may find its transactional.id's coordinator
    (DESCRIBE) but not write with it (error 53, TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an ACL on a
    resource ends ``allow.everyone`` there, so the DESCRIBE needs its own ALLOW."""
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType

    deny = ACLPermissionType.DENY
    acls = [
        ACL("User:bob", "*", ACLOperation.WRITE, deny, ResourcePattern(ResourceType.TOPIC, "*")),
        ACL(
            "User:bob",
            "*",
            ACLOperation.IDEMPOTENT_WRITE,
            deny,
            ResourcePattern(ResourceType.CLUSTER, "kafka-cluster"),
        ),
        ACL("User:carol", "*", ACLOperation.WRITE, deny, ResourcePattern(ResourceType.TRANSACTIONAL_ID, "*")),
        ACL(
            "User:carol",
            "*",
            ACLOperation.DESCRIBE,
            ACLPermissionType.ALLOW,
            ResourcePattern(ResourceType.TRANSACTIONAL_ID, "*"),
        ),
    ]
    admin = broker.admin()
    assert not admin.create_acls(acls)["failed"]
    admin.close()
    time.sleep(1)  # the ACLs reach the broker through the metadata log
    for user, txn in (("bob", None), ("carol", "rl-refused")):
        options = {"linger_ms": 0, "client_id": f"{user}-app", "max_block_ms": 5000}
        p = producer(broker.sasl(user), **options, **({"transactional_id": txn} if txn else {}))
        try:
            if txn:
                p.init_transactions()
            p.send("rl-traffic", value=b"{}").get(timeout=10)
        except Exception:  # refused, as it should be
            pass
        finally:
            p.close(timeout=5)


def _enable_request_log(broker) -> dict:
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = broker.admin()
    try:
        resource = ConfigResource(
            ConfigResourceType.BROKER_LOGGER, "1", configs={"kafka.request.logger": "DEBUG"}
        )
        return admin.alter_configs([resource])
    finally:
        admin.close()


def _verdicts(frame) -> list[tuple]:
    return sorted(map(tuple, frame[["principal", "producer_id", "verdict"]].itertuples(index=False)))


def test_the_real_request_log_followed_live_decides_as_the_clients_record(
    broker, spark, make_enforcer, tmp_path
):
    record = Record()
    _steady(broker, Record())  # the logger is off, as Kafka ships it: no line
    assert broker.request_log_lines() == []
    assert _enable_request_log(broker) == {"broker_logger": {"1": "OK"}}

    live = make_enforcer(tmp_path / "live", QUOTAS, **FORMAT)
    query = live.follow(broker.nodes[0].logs)
    try:
        kafka_python_loop(broker, record, "crash-loop", restarts=8)
        query.processAllAvailable()  # a batch while the clients still run
        _librdkafka_loop(broker, record, "per-batch", restarts=6)
        _steady(broker, record)
        _transactional(broker, record)
        _refused(broker)
        assert list(broker.nodes[0].logs.glob("kafka-request.log.*")), "the request log never rolled"
        query.processAllAvailable()
        assert query.isActive, query.exception()
    finally:
        query.stop()

    got = {k: read_output(live.out, k) for k in ("decisions", "skipped", "dead-letters")}
    expected = make_enforcer(tmp_path / "events", QUOTAS).run(record.events())
    assert _verdicts(got["decisions"]) == _verdicts(expected["decisions"])
    verdicts = got["decisions"].groupby("principal").verdict.value_counts().to_dict()
    assert verdicts[("User:crash-loop", "THROTTLE")] == 4 and verdicts[("User:per-batch", "THROTTLE")] == 3
    assert ("User:steady", "THROTTLE") not in verdicts and ("User:alice", "THROTTLE") not in verdicts
    skipped = dict(zip(got["skipped"]["what"], got["skipped"]["count"], strict=True))
    assert skipped.get(REFUSED, 0) >= 1 and skipped["PRODUCE"] > 0
    assert got["dead-letters"].empty, got["dead-letters"].to_dict("records")
    _each_decision_names_its_application(got["decisions"], broker)

    lines = broker.request_log_lines()
    if os.environ.get("PIDQUOTA_WRITE_CORPUS"):  # how the corpus was taken: one line per new shape
        _write_corpus(lines)
    known = {shape(line) for path in CORPUS for line in path.read_text().splitlines()}
    assert {shape(line) for line in lines} <= known, "a line shape the corpus lacks: PIDQUOTA_WRITE_CORPUS=1"


def _each_decision_names_its_application(decisions, broker) -> None:
    """The clients as they were started: client.id, software, address, transactional.id, and
    the broker's listener (the followed file names no broker)."""
    seen = decisions.groupby("principal")[["client_id", "client_software", "transactional_id"]].agg(set)
    assert seen.loc["User:crash-loop", "client_id"] == {"crash-loop-app"}
    assert {s.split()[0] for s in seen.loc["User:crash-loop", "client_software"]} == {"kafka-python"}
    assert {s.split()[0] for s in seen.loc["User:per-batch", "client_software"]} == {"confluent-kafka-python"}
    assert seen.loc["User:alice", "transactional_id"] == {"rl-orders"}
    assert set(decisions["client_address"]) == {"127.0.0.1"}
    node = broker.nodes[0]
    assert set(decisions["broker"]) <= {f"127.0.0.1:{p}" for p in (node.port, node.sasl_port)}, set(
        decisions["broker"]
    )


def _write_corpus(lines: list[str], kafka_version: str | None = None) -> None:
    """Add to this Kafka version's corpus the first line of each shape it lacks."""
    import kafka_broker

    path = DATA / f"request-log-apache-kafka-{kafka_version or kafka_broker.version()}.log"
    kept = path.read_text().splitlines() if path.exists() else []
    known = {shape(line) for line in kept}
    for line in lines:
        if shape(line) not in known:
            known.add(shape(line))
            kept.append(line)
    path.write_text("\n".join(kept) + "\n")


@pytest.mark.parametrize("corpus", CORPUS, ids=lambda p: p.name)
def test_every_line_apache_kafka_wrote_is_read_as_its_json_says(corpus):
    """Each corpus line, as the broker wrote it: a granted init is an event with the line's
    principal, PID, epoch and time; a refused one is counted, never an event."""
    import pyarrow as pa

    lines = corpus.read_text().splitlines()
    values = pa.array([line.encode() for line in lines], pa.binary())
    judged = RequestLogJudge(Options(), 256).judge(values, [corpus.name] * len(lines), [None] * len(lines))
    assert judged.dead == []
    granted = []
    for line in lines:
        doc = json.loads(re.search(r"Completed request:(\{.*\}) \(", line).group(1))
        if doc["response"]["errorCode"] == 0:
            granted.append(
                (doc["principal"], doc["response"]["producerId"], doc["response"]["producerEpoch"])
            )
    got = [(e["principal"], e["producer_id"], e["producer_epoch"]) for e in judged.events]
    assert sorted(got) == sorted(granted)
    assert judged.skipped.get(REFUSED, 0) == len(lines) - len(granted)


def test_a_newer_init_version_with_fields_pidquota_does_not_know_is_still_an_event():
    """InitProducerId v6 (KIP-939) adds ``enable2Pc``, ``keepPreparedTxn`` and
    ``ongoingTxnProducerId``/``Epoch``; a later version may add more. A line that has them is
    read by the fields pidquota knows, as the broker wrote them around the new ones."""
    import pyarrow as pa

    line = next(line for path in CORPUS for line in path.read_text().splitlines() if shape(line)[2] == 0)
    newer = (
        line.replace('"requestApiVersion":4', '"requestApiVersion":9')
        .replace(
            '"producerEpoch":-1}', '"producerEpoch":-1,"enable2Pc":false,"keepPreparedTxn":false,"x":[1]}'
        )
        .replace(
            '"throttleTimeMs":0,"errorCode":0', '"throttleTimeMs":0,"errorCode":0,"ongoingTxnProducerId":-1'
        )
    )
    assert newer.count("enable2Pc") == 1 and "ongoingTxnProducerId" in newer and shape(newer)[0] == 9
    judged = RequestLogJudge(Options(), 256).judge(pa.array([newer.encode()], pa.binary()), ["x"], [None])
    want = json.loads(re.search(r"Completed request:(\{.*\}) \(", line).group(1))["response"]
    assert [(e["producer_id"], e["producer_epoch"]) for e in judged.events] == [
        (want["producerId"], want["producerEpoch"])
    ]


def test_the_init_only_filter_keeps_every_init_and_nothing_else(tmp_path):
    """docker/kafka/log4j2-init-producer-id.yaml (docs/real-cluster.md): the RequestAppender
    keeps INIT_PRODUCER_ID completions alone, every one of them."""
    import kafka_broker

    broker = ApacheKafka(
        tmp_path / "kafka", log4j2=kafka_broker.LOG4J2.with_name("log4j2-init-producer-id.yaml")
    )
    broker.start()
    try:
        record = Record()
        kafka_python_loop(broker, record, "crash-loop", restarts=5)
        _steady(broker, record)
        _transactional(broker, record)
        written = broker.nodes[0].request_log.read_text().splitlines()
    finally:
        broker.stop()
    assert written and all('"requestApiKeyName":"INIT_PRODUCER_ID"' in line for line in written)
    granted = [shape(line) for line in written if shape(line)[2] == 0]
    assert len(granted) == len(record.inits)  # 5 + 1 + 2 (a re-init is a line too)


# -- Kafka before 4.0 -----------------------------------------------------------------------
KAFKA_3 = "3.9.1"  # the last 3.x; Maven Central serves it with its dependencies
ROOT = Path(__file__).resolve().parents[2]


def _docs_pre_4_lines() -> list[str]:
    """The properties lines under "Kafka before 4.0" in docs/real-cluster.md."""
    text = (ROOT / "docs" / "real-cluster.md").read_text()
    block = re.search(r"```properties\n(.*?)```", text.split("**Kafka before 4.0**", 1)[1], re.S)
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_docs_pre_4_lines_are_the_3x_brokers_logging():
    import kafka_broker

    shipped = kafka_broker.LOG4J.read_text().splitlines()
    assert _docs_pre_4_lines() and all(line in shipped for line in _docs_pre_4_lines())


def test_kafka_3_writes_the_request_log_the_docs_configure_and_every_init_is_read(tmp_path):
    """Apache Kafka 3.9.1 (log4j 1) with docker/kafka/log4j.properties, which holds the docs'
    lines: kafka-python and librdkafka crash loops, a transactional producer and two refused
    users. Every granted init is read as the clients recorded it, every refused one counted,
    and each line's shape is in the corpus taken from that version's own output."""
    broker = ApacheKafka(tmp_path / "kafka", kafka_version=KAFKA_3, heap="384m")
    broker.start()
    record = Record()
    try:
        kafka_python_loop(broker, record, "crash-loop", restarts=3)
        _librdkafka_loop(broker, record, "per-batch", restarts=2)
        _transactional(broker, record)
        _refused(broker)
        lines = broker.request_log_lines()
    finally:
        broker.stop()
    import pyarrow as pa

    judged = RequestLogJudge(Options(), 256).judge(
        pa.array([line.encode() for line in lines], pa.binary()), ["k3"] * len(lines), ["1"] * len(lines)
    )
    assert judged.dead == []
    got = sorted((e["principal"], e["producer_id"], e["producer_epoch"]) for e in judged.events)
    assert got == sorted((u, p, e) for _, u, p, e in record.inits)
    assert judged.skipped.get(REFUSED, 0) >= 2  # bob's and carol's, as producerId -1
    if os.environ.get("PIDQUOTA_WRITE_CORPUS"):
        _write_corpus(lines, KAFKA_3)
    known = {
        shape(line) for line in (DATA / f"request-log-apache-kafka-{KAFKA_3}.log").read_text().splitlines()
    }
    assert {shape(line) for line in lines} <= known, "a line shape the corpus lacks: PIDQUOTA_WRITE_CORPUS=1"
