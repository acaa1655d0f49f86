"""Apache Kafka for the Kafka benchmarks: one node from ``scripts/kafka_broker.py`` (Maven
Central's jars, fetched once), in a temporary folder, on free loopback ports."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from scripts.kafka_broker import Cluster


class Broker:
    """A running one-node cluster; :meth:`terminate` stops it and deletes its folder."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="pidquota-bench-kafka-"))
        self.cluster = Cluster(self.dir).start()

    def terminate(self) -> None:
        self.cluster.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_kafka() -> tuple[Broker, str]:
    """Start Apache Kafka; (the broker, its PLAINTEXT bootstrap HOST:PORT) once it serves."""
    broker = Broker()
    return broker, broker.cluster.bootstrap
