"""Real Kafka producers that behave as the generator's users do: a crash loop (a new
idempotent producer for each few records: a new PID each time) and a steady producer (one
producer, one PID, for the whole run).

The generator (``traffic/generator.py``) simulates producers and writes the events they
would cause. These are real clients instead: each restart of a crash loop asks a broker
for a producer id (InitProducerId), which a broker's request log records and which the
record batches carry. ``make_producer()`` builds the client, so any client library will
do; ``pid_of(producer)`` reads the PID it was given, when the library tells.

Worked example: ``crash_loop(make, "orders", restarts=3, records=2)`` starts a producer,
sends 2 records, closes it, and does that 3 times: 6 records in 3 batches or more, under 3
different producer ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Sent:
    """What a behaviour sent: records, and the producer ids it saw (when readable)."""

    records: int = 0
    pids: list[int] = field(default_factory=list)


def kafka_python_pid(producer) -> int | None:
    """The producer id kafka-python was given (None before its first send completes)."""
    manager = getattr(producer, "_transaction_manager", None)
    pid = getattr(getattr(manager, "producer_id_and_epoch", None), "producer_id", None)
    return pid if isinstance(pid, int) and pid >= 0 else None


def _send(producer, topic: str, n: int, key: bytes, start: int) -> None:
    for i in range(n):
        producer.send(topic, key=key, value=f'{{"n":{start + i}}}'.encode())
    producer.flush()


def crash_loop(
    make_producer: Callable[[], object],
    topic: str,
    restarts: int,
    records: int = 3,
    gap_s: float = 0.0,
    pid_of: Callable[[object], int | None] = kafka_python_pid,
    key: bytes = b"crash-loop",
) -> Sent:
    """``restarts`` producers one after another, each sending ``records`` and closing."""
    sent = Sent()
    for _ in range(restarts):
        producer = make_producer()
        try:
            _send(producer, topic, records, key, sent.records)
            sent.records += records
            pid = pid_of(producer)
            if pid is not None:
                sent.pids.append(pid)
        finally:
            producer.close()
        time.sleep(gap_s)
    return sent


def steady(
    make_producer: Callable[[], object],
    topic: str,
    batches: int,
    records: int = 3,
    gap_s: float = 0.0,
    pid_of: Callable[[object], int | None] = kafka_python_pid,
    key: bytes = b"steady",
) -> Sent:
    """One producer sending ``batches`` times ``records`` records, ``gap_s`` apart."""
    sent = Sent()
    producer = make_producer()
    try:
        for _ in range(batches):
            _send(producer, topic, records, key, sent.records)
            sent.records += records
            time.sleep(gap_s)
        pid = pid_of(producer)
        if pid is not None:
            sent.pids.append(pid)
    finally:
        producer.close()
    return sent
