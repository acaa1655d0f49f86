"""Apache Kafka for the tests (``scripts/kafka_broker.py`` starts it) and a TCP gate that can make it
stop answering."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import require


class Gate:
    """A TCP relay from a port of its own to ``upstream``, which can stop passing bytes.

    A broker that "stops answering" is simulated here rather than with SIGSTOP: the
    relay keeps accepting connections and reading requests, but holds every byte
    while closed, so clients see exactly a broker that takes requests and never
    answers, on any kernel or sandbox.
    """

    def __init__(self, upstream: int):
        import socket
        import threading

        self.upstream, self.open = upstream, threading.Event()
        self.open.set()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # closed
            try:
                broker = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                client.close()  # the broker is not there: this client is refused, the next tried
                continue
            for src, dst in ((client, broker), (broker, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src, dst) -> None:
        try:
            while data := src.recv(65536):
                self.open.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                sock.close()

    def close(self) -> None:
        self.open.set()
        self.server.close()


# A test broker's plug-in describes its topics every second, not every 5 s (its default,
# pidquota.plugin.check.ms): a test waits for it to see a topic made or remade, and the plug-in's
# broker tests took 50 s instead of 68 for one Kafka version (2026-11-30).
PLUGIN_CHECK_MS = "1000"


class ApacheKafka:
    """Apache Kafka itself (KRaft, from Maven Central's jars: ``scripts/kafka_broker.py``), one
    node or ``size`` of them, on free loopback ports under ``tmp``.

    ``bootstrap`` is the PLAINTEXT listener (clients are ``User:ANONYMOUS``, a super user);
    ``sasl_bootstrap`` the SASL/PLAIN one, where :meth:`sasl` gives a user's client options. The
    request log is at DEBUG in each node's ``request_log``. With ``gated=True`` (one node) clients
    of the PLAINTEXT listener reach it through a :class:`Gate`, so :meth:`pause` and
    :meth:`resume` can make it stop answering.
    """

    def __init__(self, tmp: Path, gated: bool = False, size: int = 1, **cluster):
        import kafka_broker

        if cluster.get("plugin") is not None:  # unless the test sets it: PLUGIN_CHECK_MS
            cluster["extra"] = {"pidquota.plugin.check.ms": PLUGIN_CHECK_MS, **(cluster.get("extra") or {})}
        self.cluster = kafka_broker.Cluster(tmp, size=size, **cluster)
        self.nodes = self.cluster.nodes
        self.gate = Gate(self.nodes[0].port) if gated else None
        if self.gate is not None:
            self.nodes[0].advertised_port = self.gate.port

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def sasl_bootstrap(self) -> str:
        return self.cluster.sasl_bootstrap

    def sasl(self, user: str) -> dict:
        """pidquota's ``kafka.*`` client options for ``user`` on the SASL/PLAIN listener."""
        return {
            "kafka.bootstrap.servers": self.sasl_bootstrap,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": user,
            "kafka.sasl.password": self.cluster.users[user],
        }

    def admin(self):
        """kafka-python's admin client on the PLAINTEXT listener (``User:ANONYMOUS``, a super user)."""
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap)

    def request_log_lines(self, api: str = "INIT_PRODUCER_ID") -> list[str]:
        """Every node's request-log lines of ``api``, live and rolled files, in the order written."""
        out = []
        for node in self.nodes:
            files = sorted(node.logs.glob("kafka-request.log.*"), key=lambda f: f.stat().st_mtime)
            for f in [*files, node.request_log]:
                if f.exists():
                    out += [
                        line for line in f.read_text().splitlines() if f'"requestApiKeyName":"{api}"' in line
                    ]
        return out

    def start(self) -> None:
        require("kafka", "an Apache Kafka broker")
        import kafka_broker

        try:
            self.cluster.start()
        except kafka_broker.BrokerError as exc:
            self.stop()
            pytest.fail(f"Apache Kafka did not start: {exc}", pytrace=False)

    def pause(self) -> None:
        """The broker takes requests and answers none (needs ``gated=True``)."""
        self.gate.open.clear()

    def resume(self) -> None:
        self.gate.open.set()

    def stop(self) -> None:
        if self.gate is not None:
            self.gate.close()
        self.cluster.stop()

    def produce(
        self,
        topic: str,
        lines: list[str],
        keys: list[str] | None = None,
        partitions: int = 3,
        create: bool = True,
    ) -> None:
        """Create ``topic`` (unless ``create`` is false: the controller may be the node a test
        killed) and produce ``lines`` with batching on (multi-record batches)."""
        from kafka import KafkaAdminClient, KafkaProducer
        from kafka.admin import NewTopic
        from kafka.errors import TopicAlreadyExistsError

        if create:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
            try:
                admin.create_topics([NewTopic(topic, partitions, 1)])
            except TopicAlreadyExistsError:
                pass
            finally:
                admin.close()
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=20)
        for i, line in enumerate(lines):
            key = keys[i].encode() if keys else None
            producer.send(topic, key=key, value=line.encode() if isinstance(line, str) else line)
        producer.flush()
        producer.close()

    def consume(self, topic: str) -> list:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap)
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        out = []
        for _ in range(20):
            got = consumer.poll(timeout_ms=500)
            if not got and out:
                break
            for records in got.values():
                out += records
        consumer.close()
        return out


# -- the Kafka source's reader as Spark calls it, without Spark ---------------------------------
def reader(kafka, topic: str, **options):
    """The Kafka source's reader for ``topic`` on ``kafka`` (an :class:`ApacheKafka`)."""
    from pidquota.sources.kafka.source import KafkaStreamReader

    return KafkaStreamReader({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, **options})


def read_rows(rd, topic: str, start: dict, end: dict) -> list[dict]:
    rows = []
    for part in rd.partitions({topic: start}, {topic: end}):
        for batch in rd.read(part):
            rows += batch.to_pylist()
    return rows


def create(kafka, topic: str, partitions: int = 1) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def read_committed(kafka, topic: str) -> list[str]:
    """Every value of ``topic`` as a read_committed consumer sees it, in partition order: read
    by the Kafka source, which drops aborted transactions itself."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    rd = reader(kafka, topic, fetchTimeoutMs="5000")
    try:
        start = rd.initialOffset()
        end = rd.latestOffset(start, ReadAllAvailable())
        return [r["value"] for r in read_rows(rd, topic, start[topic], end[topic])]
    finally:
        rd.stop()
