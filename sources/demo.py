"""The embedded default's source: the traffic generator in accelerated event time.

A Python streaming data source (``pidquota-demo``). Offsets are
``{"origin": ms, "t": ms}``: the generator's start and the event time reached.
Event time runs ``speed`` times faster than the wall clock (60x: an hour a
minute). The generator runs on the driver side, in ``partitions()``, and the
events travel inside the input partitions. Its output depends only on the
seed, the origin and the time reached, so a restarted query fast-forwards to
its checkpointed offset and carries on with the same traffic.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from pidquota.sources import stopping
from pidquota.traffic.generator import TrafficGenerator


class _Lines(InputPartition):
    """A share of a batch's events, zlib-compressed (JSON lines shrink ~10x), as
    the partition travels inside the task."""

    def __init__(self, lines: list[str]):
        self.blob = zlib.compress("\n".join(lines).encode(), 1) if lines else b""

    @property
    def lines(self) -> list[str]:
        return zlib.decompress(self.blob).decode().split("\n") if self.blob else []


# A fresh stream's first batch: five minutes of event time (a whole batch at the default
# maxBatchMs), whatever the wall clock did: per-batch is already throttled in the first table
FIRST_BATCH_MS = 300_000


class DemoStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict):
        self.speed = float(options.get("speed", 60))
        self.rate = float(options.get("rate", 50))
        self.seed = int(options.get("seed", 7))
        self.max_batch_ms = int(options.get("maxBatchMs", 5 * 60_000))
        self.start_ms = int(options.get("startMs", int(time.time() * 1000) // 1000 * 1000))
        self.options = options
        self._anchor: tuple[float, int] | None = None
        self._gen: TrafficGenerator | None = None

    def initialOffset(self) -> dict:
        return {"origin": self.start_ms, "t": self.start_ms}

    def latestOffset(self, start: dict, limit) -> dict:
        if stopping.requested(self.options):
            return start
        if self._anchor is None:  # this run's event time starts where the last one stopped
            # a fresh stream starts with a backlog: its first batch holds the first minutes of
            # traffic however soon it comes, so the first table already shows who is throttled
            # (on a busy machine a first batch of a few seconds showed no one)
            backlog = min(self.max_batch_ms, FIRST_BATCH_MS) if int(start["t"]) == int(start["origin"]) else 0
            self._anchor = (time.monotonic() - backlog / 1000 / self.speed, int(start["t"]))
        wall0, t0 = self._anchor
        now = t0 + int((time.monotonic() - wall0) * 1000 * self.speed)
        return {
            "origin": start["origin"],
            "t": max(int(start["t"]), min(now, int(start["t"]) + self.max_batch_ms)),
        }

    def _generator_at(self, origin: int, t: int) -> TrafficGenerator:
        gen = self._gen
        if gen is None or gen.start_ms != origin or gen.now_ms > t:
            gen = self._gen = TrafficGenerator(seed=self.seed, rate=self.rate, start_ms=origin)
        while gen.now_ms < t:  # fast-forward after a restart
            gen.events(min(t, gen.now_ms + 600_000))
        return gen

    def partitions(self, start: dict, end: dict):
        gen = self._generator_at(int(start["origin"]), int(start["t"]))
        lines = gen.events(int(end["t"]))[1]
        half = len(lines) // 2
        return [_Lines(lines[:half]), _Lines(lines[half:])]

    def read(self, partition: _Lines) -> Iterator[tuple]:
        for line in partition.lines:
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
