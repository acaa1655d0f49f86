"""The traffic generator: a cluster model that emits produce-request events."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from pidquota.conf.errors import ConfigError
from pidquota.traffic.behaviours import BEHAVIOURS, WELL_BEHAVED, Behaviour
from pidquota.traffic.blocks import BlockStore, MemoryBlockStore
from pidquota.traffic.cluster import Cluster, Controller
from pidquota.traffic.mixes import load_mix, well_behaved_period_ms

STEP_MS = 1_000  # the simulation's grid: output depends on seed and parameters only
DEFAULT_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class TrafficGenerator:
    """Produce-request events from a simulated cluster, in event-time order.

    The simulation advances in fixed 1 s steps of event time from
    ``start_ms``, so :meth:`events` gives the same events for the same seed
    and parameters however the caller slices time, as long as the block
    store starts in the same state (a persistent store continues its PID
    numbering across runs, as KIP-730 requires).
    """

    def __init__(
        self,
        seed: int = 7,
        brokers: int = 6,
        mix: str | dict = "default",
        rate: float = 200.0,
        start_ms: int = DEFAULT_START_MS,
        store: BlockStore | None = None,
        window_ms: int = 3_600_000,
        blocks_per_s: float = 10.0,
    ) -> None:
        if rate <= 0:
            raise ConfigError(f"--rate must be > 0 events per second, got {rate}")
        spec = load_mix(mix) if isinstance(mix, str) else mix
        seeds = np.random.SeedSequence(seed).spawn(len(spec) + 1)
        self.start_ms = self.now_ms = int(start_ms)
        self.controller = Controller(store or MemoryBlockStore(), blocks_per_s, start_ms)
        self.cluster = Cluster(self.controller, brokers, np.random.default_rng(seeds[0]))
        period = well_behaved_period_ms(spec, rate)
        self.behaviours: list[Behaviour] = []
        for (principal, params), ss in zip(spec.items(), seeds[1:], strict=True):
            params = {k: v for k, v in params.items() if k != "behaviour"}
            kind = spec[principal]["behaviour"]
            if kind in WELL_BEHAVED and params.get("period_ms") is None:
                params["period_ms"] = period
            if kind == "returning" and params.get("idle_ms") is None:
                params["idle_ms"] = window_ms + 15 * 60_000  # idle past the window: forgotten, then back
            self.behaviours.append(
                BEHAVIOURS[kind](principal, np.random.default_rng(ss), self.start_ms, **params)
            )
        self._topics = {b.principal: b.principal[5:] for b in self.behaviours}

    def events(self, end_ms: int) -> tuple[np.ndarray, list[str]]:
        """Advance to ``end_ms``; return the timestamps and JSON lines of ``[now, end)``."""
        ts, lines, _ = self.keyed_events(end_ms)
        return ts, lines

    def keyed_events(self, end_ms: int) -> tuple[np.ndarray, list[str], list[str]]:
        """Like :meth:`events`, plus each line's principal (a Kafka key)."""
        if end_ms < self.now_ms:
            raise ValueError(f"cannot go back in time: at {self.now_ms}, asked for {end_ms}")
        times, which, bodies, owners = [], [], [], []
        while self.now_ms < end_ms:
            a = self.now_ms
            b = min(end_ms, (a - self.start_ms) // STEP_MS * STEP_MS + self.start_ms + STEP_MS)
            self.cluster.advance(a, self.start_ms)
            leaders = self.cluster.leaders
            for beh in self.behaviours:
                for seg in beh.step(a, b, self.cluster):
                    t = seg.times(a, b)
                    if not len(t):
                        continue
                    beh.events += len(t)
                    txn = f'"transactional_id":"{seg.txn}",' if seg.txn else ""
                    bodies.append(
                        f'"principal":"{beh.principal}","producer_id":{seg.pid},"producer_epoch":{seg.epoch},'
                        f'"client_id":"{seg.client}",{txn}"broker_id":{int(leaders[seg.partition])},'
                        f'"topic":"{self._topics[beh.principal]}","partition":{seg.partition}}}'
                    )
                    owners.append(beh.principal)
                    times.append(t)
                    which.append(np.full(len(t), len(bodies) - 1, dtype=np.int64))
            self.now_ms = b
        if not times:
            return np.empty(0, dtype=np.int64), [], []
        ts, idx = np.concatenate(times), np.concatenate(which)
        order = np.lexsort((idx, ts))
        ts, idx = ts[order], idx[order]
        order_idx = idx.tolist()
        lines = [f'{{"timestamp":{t},{bodies[i]}' for t, i in zip(ts.tolist(), order_idx, strict=True)]
        return ts, lines, [owners[i] for i in order_idx]

    def chunks(self, duration_ms: int, chunk_ms: int = 60_000) -> Iterator[list[str]]:
        end = self.start_ms + duration_ms
        while self.now_ms < end:
            yield self.events(min(end, self.now_ms + chunk_ms))[1]

    def keyed_chunks(self, duration_ms: int, chunk_ms: int = 60_000) -> Iterator[tuple[list[str], list[str]]]:
        end = self.start_ms + duration_ms
        while self.now_ms < end:
            yield self.keyed_events(min(end, self.now_ms + chunk_ms))[1:]

    def summary(self) -> dict:
        c = self.cluster
        return {
            "principals": {b.principal: b.summary() for b in self.behaviours},
            "cluster": {
                "brokers": len(c.brokers),
                "broker_epochs": {b.broker_id: b.epoch for b in c.brokers},
                "blocks_allocated": sum(len(b.blocks) for b in c.brokers),
                "allocations_throttled": self.controller.throttled,
                "leadership_moves": c.moves,
                "broker_failures": c.failures,
                "txn_epoch_bumps": c.coordinator.bumps,
                "txn_init_retries": c.coordinator.retries,
                "txn_fenced": c.coordinator.fenced,
            },
        }
