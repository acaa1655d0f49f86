"""pidquota's broker plug-in (plugin/, issue 42) on real Apache Kafka brokers, 3.9.1, 4.1.1 and
the newest 4.x: a principal in the state topic is refused new PIDs (error 31), its producers
that have their PID keep producing, every other user is served; a stale heartbeat or the switch
turns it off (fail open); records it would not write are skipped; a state topic that does not
exist refuses nothing."""

from __future__ import annotations

import time

import pytest
from harness.plugin import plugin_jar

pytestmark = pytest.mark.kafka

TOPIC = "pidquota-throttle-state"
VERSIONS = ["3.9.1", "4.1.1", "4.4.0"]


@pytest.fixture(scope="module", params=VERSIONS)
def broker(request, tmp_path_factory):
    import kafka_broker
    from harness.kafka import ApacheKafka

    version = request.param
    kafka_broker.fetch(version)
    node = ApacheKafka(
        tmp_path_factory.mktemp(f"plugin-{version}"), plugin=plugin_jar(), kafka_version=version, jmx=True
    )
    node.cluster.start()
    yield node
    node.cluster.stop()


def _state(broker, records: list[tuple[str, str | None]]) -> None:
    """Records to the state topic as pidquota writes them (here by the super user ANONYMOUS)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for key, value in records:
        producer.send(TOPIC, key=key.encode(), value=None if value is None else value.encode())
    producer.flush(10)
    producer.close(5)


def _producer(broker, user: str):
    from kafka import KafkaProducer

    o = broker.sasl(user)
    return KafkaProducer(
        bootstrap_servers=o["kafka.bootstrap.servers"],
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username=user,
        sasl_plain_password=o["kafka.sasl.password"],
        enable_idempotence=True,
        max_block_ms=8000,
        request_timeout_ms=8000,
    )


def _new_pid(broker, user: str) -> str:
    """'granted', 'refused' (the broker's error 31, CLUSTER_AUTHORIZATION_FAILED, which
    kafka-python takes as fatal for the producer) or another error's name, as a new idempotent
    producer of ``user`` meets it at its first send."""
    p = _producer(broker, user)
    try:
        p.send("orders", b"x").get(timeout=10)
        return "granted"
    except Exception as exc:  # kafka-python raises the init's error from the send
        return "refused" if "Error 31" in str(exc) else type(exc).__name__
    finally:
        p.close(timeout=2)


def _until(check, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.3)


def test_a_throttled_user_gets_no_new_pid_and_its_running_producer_and_others_go_on(broker):
    from harness.kafka import create

    create(broker, "orders")
    assert _new_pid(broker, "crash-loop") == "granted"  # no state topic yet: refuses nothing
    running = _producer(broker, "crash-loop")
    running.send("orders", b"before").get(timeout=10)  # has its PID
    now = int(time.time() * 1000)
    _state(broker, [("h", f"{now} 60000"), ("t:User:crash-loop", str(now + 120_000))])
    _until(lambda: _new_pid(broker, "crash-loop") != "granted")
    assert _new_pid(broker, "crash-loop") == "refused"
    assert _new_pid(broker, "steady") == "granted"
    for i in range(5):
        running.send("orders", b"during %d" % i).get(timeout=10)  # Produce is not InitProducerId
    running.close(timeout=2)
    # its JMX metrics, the broker's authorizer's (a combined node's controller has one too)
    stats = "io.pidquota:type=PidQuotaAuthorizer,broker=1"
    node = broker.cluster.nodes[0]
    assert broker.cluster.jmx_value(node, stats, "Refused") >= 1
    assert broker.cluster.jmx_value(node, stats, "FailOpen") == 0
    assert broker.cluster.jmx_value(node, stats, "MeanInitAuthorizationNanos") > 0


def test_records_it_would_not_write_are_skipped_and_change_nothing(broker):
    now = int(time.time() * 1000)
    _state(
        broker,
        [
            ("t:User:*", str(now + 120_000)),
            ("t:User:steady", "soon"),
            ("other", "1"),
            ("h", "garbage"),
            ("t:User:", "5"),
        ],
    )
    _state(broker, [("h", f"{now} 60000")])
    time.sleep(2)
    assert _new_pid(broker, "steady") == "granted"
    assert _new_pid(broker, "crash-loop") == "refused"


def test_a_stale_heartbeat_and_the_switch_fail_open(broker):
    now = int(time.time() * 1000)
    _state(broker, [("h", f"{now - 120_000} 60000")])  # pidquota gone two minutes ago
    _until(lambda: _new_pid(broker, "crash-loop") == "granted")
    _state(broker, [("h", f"{now} 60000")])
    _until(lambda: _new_pid(broker, "crash-loop") != "granted")
    _state(broker, [("switch", "off")])
    _until(lambda: _new_pid(broker, "crash-loop") == "granted")
    _state(broker, [("switch", "on"), ("t:User:crash-loop", None)])  # the tombstone ends it
    time.sleep(2)
    assert _new_pid(broker, "crash-loop") == "granted"
