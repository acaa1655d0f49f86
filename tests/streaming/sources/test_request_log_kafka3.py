"""The request log of Apache Kafka before 4.0 (log4j 1), configured as docs/real-cluster.md
tells an operator to, on Apache Kafka 3.9.1 from Maven Central: its INIT_PRODUCER_ID lines
are read as the clients' own record of their producer ids says (issue 33: every snippet in
the docs run against a real broker)."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest
from harness.kafka import ApacheKafka

from pidquota.store.kafka import producer
from pidquota.streaming.request_log import Options, RequestLogJudge
from pidquota.traffic.clients import kafka_python_pid

pytestmark = [pytest.mark.kafka]

ROOT = Path(__file__).resolve().parents[3]
KAFKA_3 = "3.9.1"  # the last 3.x; Maven Central serves it with its dependencies


def _docs_snippet() -> list[str]:
    """The properties lines under "Kafka before 4.0" in docs/real-cluster.md."""
    text = (ROOT / "docs" / "real-cluster.md").read_text()
    after = text.split("**Kafka before 4.0**", 1)[1]
    block = re.search(r"```properties\n(.*?)```", after, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_the_docs_lines_are_the_brokers_logging():
    import kafka_broker

    shipped = kafka_broker.LOG4J.read_text().splitlines()
    assert _docs_snippet() and all(line in shipped for line in _docs_snippet())


def test_kafka_3_writes_the_request_log_the_docs_configure_and_pidquota_reads_it(tmp_path):
    broker = ApacheKafka(tmp_path / "kafka", kafka_version=KAFKA_3, heap="384m")
    broker.start()
    try:
        pids = []
        for _ in range(3):  # three idempotent producers: three producer ids
            p = producer(broker.sasl("alice"), linger_ms=0, client_id="kafka3-app")
            p.send("k3-traffic", value=b'{"n":1}')
            p.flush()
            pids.append(kafka_python_pid(p))
            p.close()
        log = broker.cluster.logs / "node-1" / "kafka-request.log"
        lines = [line for line in log.read_text().splitlines() if "INIT_PRODUCER_ID" in line]
    finally:
        broker.stop()
    assert None not in pids and len(set(pids)) == 3
    values = pa.array([line.encode() for line in lines], pa.binary())
    judged = RequestLogJudge(Options(), 256).judge(values, [str(log)] * len(lines), ["1"] * len(lines))
    assert judged.dead == []
    assert sorted((e["principal"], e["producer_id"]) for e in judged.events) == [
        ("User:alice", p) for p in sorted(pids)
    ]
