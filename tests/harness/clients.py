"""Real Kafka clients for the tests, beside kafka-python: confluent-kafka (librdkafka), with the
``send``/``flush``/``close`` of kafka-python's producer, so ``traffic/clients.py`` drives both."""

from __future__ import annotations

import time


class ConfluentProducer:
    """An idempotent librdkafka producer (``compression`` none, gzip, snappy, lz4 or zstd; ``pad``
    bytes of spaces after each value, so that a small batch is worth compressing). librdkafka
    does not hand out its producer id, but its statistics name it: :meth:`pid` reads them."""

    def __init__(self, bootstrap: str, compression: str = "none", pad: int = 0, **conf):
        from confluent_kafka import Producer

        self.eos: dict = {}
        settings = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "compression.type": compression,
            "linger.ms": 5,
            "statistics.interval.ms": 100,
            "stats_cb": self._stats,
            **conf,
        }
        self.producer = Producer(settings)
        self.pad = b" " * pad  # librdkafka sends a batch uncompressed when compressing does not shrink it

    def _stats(self, text: str) -> None:
        import json

        self.eos = json.loads(text).get("eos") or self.eos

    def pid(self, timeout_s: float = 5.0) -> int | None:
        """The producer id the broker granted, from librdkafka's statistics (``eos``)."""
        import time

        deadline = time.monotonic() + timeout_s
        while self.eos.get("producer_id", -1) < 0 and time.monotonic() < deadline:
            self.producer.poll(0.05)
        pid = self.eos.get("producer_id", -1)
        return pid if pid >= 0 else None

    def send(self, topic: str, key: bytes | None = None, value: bytes | None = None):
        self.producer.produce(topic, key=key, value=(value or b"") + self.pad)

    def flush(self) -> None:
        left = self.producer.flush(30)
        if left:
            raise RuntimeError(f"{left} records not delivered")

    def close(self) -> None:
        self.flush()


class Record:
    """The clients' own record of their inits: (ms, principal, producer id, epoch)."""

    def __init__(self):
        self.inits: list[tuple[int, str, int, int]] = []

    def add(self, principal: str, pid: int | None, epoch: int = 0, at: int | None = None) -> None:
        assert pid is not None and pid >= 0, f"{principal}'s client did not tell its producer id"
        self.inits.append((at or int(time.time() * 1000), principal, pid, epoch))

    def events(self) -> list[dict]:
        return [
            {"timestamp": t, "principal": u, "producer_id": p, "producer_epoch": e}
            for t, u, p, e in self.inits
        ]


def kafka_python_loop(broker, record: Record, user: str, restarts: int, topic: str = "rl-traffic") -> None:
    """A kafka-python crash loop as ``user`` on ``broker``'s SASL listener: ``restarts``
    idempotent producers one after another, one record each, each PID in ``record``."""
    from pidquota.store.kafka import producer
    from pidquota.traffic.clients import kafka_python_pid

    for _ in range(restarts):
        at = int(time.time() * 1000)
        p = producer(broker.sasl(user), linger_ms=0, client_id=f"{user}-app")
        p.send(topic, value=b'{"n":1}')
        p.flush()
        record.add(f"User:{user}", kafka_python_pid(p), at=at)
        p.close()
