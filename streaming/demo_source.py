"""The embedded default's synthetic source: produce requests in accelerated event time.

A Python streaming data source (``pidquota-demo``) whose offsets are event
times in ms. Event time runs ``speed`` times faster than the wall clock, so
an hour of traffic passes in a minute at the default 60x. Each micro-batch
covers ``[start, end)`` and its events are a pure function of that range,
so a replayed batch yields the same events.

The traffic: three steady users with long-lived producers, a crash-looping
client that takes a new PID every 5 s, a client that opens a producer per
request, and a legacy client without idempotence (PID -1).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import numpy as np
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

SECOND = 1000

# (principal, behaviour, count or period, pid base)
STEADY = (("User:orders", 12, 1_000), ("User:payments", 8, 2_000), ("User:analytics", 20, 3_000))
CRASH_LOOP = ("User:crash-loop", 5 * SECOND, 100_000)  # a new producer every 5 s
PER_BATCH = ("User:per-batch", 3 * SECOND, 500_000)  # a new producer per request, every 3 s
LEGACY = ("User:legacy", 2 * SECOND)


def _ticks(start: int, end: int, period: int, phase: int) -> np.ndarray:
    """Times t in [start, end) with t = phase (mod period)."""
    first = start + (phase - start) % period
    return np.arange(first, end, period, dtype=np.int64)


def _line(ts: int, principal: str, pid: int, epoch: int, client: str, broker: int) -> str:
    return json.dumps(
        {
            "timestamp": ts,
            "principal": principal,
            "producer_id": pid,
            "producer_epoch": epoch,
            "client_id": client,
            "broker_id": broker,
        }
    )


def demo_events(start: int, end: int) -> list[str]:
    """All demo events with ``start <= timestamp < end``, as JSON lines."""
    out: list[tuple[int, str]] = []
    for principal, producers, base in STEADY:
        for k in range(producers):
            for t in _ticks(start, end, SECOND, (k * 37) % SECOND).tolist():
                out.append((t, _line(t, principal, base + k, 0, f"{principal[5:]}-{k}", k % 3)))
    name, period, base = CRASH_LOOP
    for t in _ticks(start, end, SECOND, 500).tolist():  # each incarnation sends every second
        out.append((t, _line(t, name, base + t // period, 0, "crashy", (t // period) % 3)))
    name, period, base = PER_BATCH
    for t in _ticks(start, end, period, 250).tolist():
        out.append((t, _line(t, name, base + t // period, 0, "batcher", 1)))
    name, period = LEGACY
    for t in _ticks(start, end, period, 100).tolist():
        out.append((t, _line(t, name, -1, -1, "legacy", 2)))
    out.sort(key=lambda x: x[0])
    return [line for _, line in out]


class _Range(InputPartition):
    def __init__(self, start: int, end: int):
        self.start, self.end = start, end


class DemoStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict):
        self.speed = float(options.get("speed", 60))
        self.max_batch_ms = int(options.get("maxBatchMs", 5 * 60 * SECOND))
        self.start_ms = int(options.get("startMs", int(time.time() * 1000) // SECOND * SECOND))
        self._anchor: tuple[float, int] | None = None

    def initialOffset(self) -> dict:
        return {"t": self.start_ms}

    def latestOffset(self, start: dict, limit) -> dict:
        if self._anchor is None:  # this run's event time starts where the last one stopped
            self._anchor = (time.monotonic(), int(start["t"]))
        wall0, t0 = self._anchor
        now = t0 + int((time.monotonic() - wall0) * 1000 * self.speed)
        return {"t": max(int(start["t"]), min(now, int(start["t"]) + self.max_batch_ms))}

    def partitions(self, start: dict, end: dict):
        a, b = int(start["t"]), int(end["t"])
        mid = (a + b) // 2
        return [_Range(a, mid), _Range(mid, b)]

    def read(self, partition: _Range) -> Iterator[tuple]:
        for line in demo_events(partition.start, partition.end):
            yield (line,)

    def commit(self, end: dict) -> None:
        pass


class DemoDataSource(DataSource):
    """``spark.readStream.format("pidquota-demo").option("speed", 60).load()``"""

    @classmethod
    def name(cls) -> str:
        return "pidquota-demo"

    def schema(self) -> str:
        return "value string"

    def streamReader(self, schema) -> DemoStreamReader:
        return DemoStreamReader(self.options)
