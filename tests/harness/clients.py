"""Real Kafka clients for the tests, beside kafka-python: confluent-kafka (librdkafka), with the
``send``/``flush``/``close`` of kafka-python's producer, so ``traffic/clients.py`` drives both."""

from __future__ import annotations


class ConfluentProducer:
    """An idempotent librdkafka producer (``compression`` none, gzip, snappy, lz4 or zstd; ``pad``
    bytes of spaces after each value, so that a small batch is worth compressing)."""

    def __init__(self, bootstrap: str, compression: str = "none", pad: int = 0, **conf):
        from confluent_kafka import Producer

        settings = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "compression.type": compression,
            "linger.ms": 5,
            **conf,
        }
        self.producer = Producer(settings)
        self.pad = b" " * pad  # librdkafka sends a batch uncompressed when compressing does not shrink it

    def send(self, topic: str, key: bytes | None = None, value: bytes | None = None):
        self.producer.produce(topic, key=key, value=(value or b"") + self.pad)

    def flush(self) -> None:
        left = self.producer.flush(30)
        if left:
            raise RuntimeError(f"{left} records not delivered")

    def close(self) -> None:
        self.flush()
