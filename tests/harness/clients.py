"""Real Kafka clients for the tests, beside kafka-python: confluent-kafka (librdkafka), with the
``send``/``flush``/``close`` of kafka-python's producer, so ``traffic/clients.py`` drives both."""

from __future__ import annotations


class ConfluentProducer:
    """An idempotent librdkafka producer (``compression`` none, gzip, snappy, lz4 or zstd)."""

    def __init__(self, bootstrap: str, compression: str = "none", **conf):
        from confluent_kafka import Producer

        settings = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "compression.type": compression,
            "linger.ms": 5,
            **conf,
        }
        self.producer = Producer(settings)

    def send(self, topic: str, key: bytes | None = None, value: bytes | None = None):
        self.producer.produce(topic, key=key, value=value)

    def flush(self) -> None:
        left = self.producer.flush(30)
        if left:
            raise RuntimeError(f"{left} records not delivered")

    def close(self) -> None:
        self.flush()
