"""Producer behaviours: who makes new PIDs, and how often.

A behaviour turns event time into *segments*: a producer instance (PID and
epoch) sending a request every ``period_ms`` from ``start`` to ``end``. The
generator turns segments into events in bulk. Each behaviour has its own
random generator, so the same seed gives the same traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pidquota.traffic.cluster import Cluster, InvalidProducerEpochError

FOREVER = 2**62


@dataclass
class Segment:
    pid: int
    epoch: int
    start: int
    end: int  # exclusive
    period: int
    phase: int
    client: str
    partition: int
    txn: str | None = None

    def times(self, a: int, b: int) -> np.ndarray:
        lo, hi = max(a, self.start), min(b, self.end)
        if lo >= hi:
            return np.empty(0, dtype=np.int64)
        first = lo + (self.phase - lo) % self.period
        return np.arange(first, hi, self.period, dtype=np.int64)


class Behaviour:
    """Base: ``step(a, b, cluster)`` returns the segments active in ``[a, b)``."""

    kind = "base"

    def __init__(self, principal: str, rng: np.random.Generator, origin_ms: int, **params) -> None:
        self.principal, self.rng, self.origin = principal, rng, origin_ms
        self.segments: list[Segment] = []
        self.pids: set[int] = set()
        self.events = 0
        self.params = params

    def _new_pid(self, cluster: Cluster, now: int) -> tuple[int, int]:
        pid, granted = cluster.any_broker(self.rng).allocate_pid(now)
        self.pids.add(pid)
        return pid, granted

    def _partition(self, cluster: Cluster) -> int:
        return int(self.rng.integers(cluster.partitions))

    def plan(self, a: int, b: int, cluster: Cluster) -> None:
        """Create the instances that start in ``[a, b)``."""

    def step(self, a: int, b: int, cluster: Cluster) -> list[Segment]:
        self.plan(a, b, cluster)
        self.segments = [s for s in self.segments if s.end > a]
        return [s for s in self.segments if s.start < b]

    def summary(self) -> dict:
        return {"behaviour": self.kind, "distinct_pids": len(self.pids), "events": self.events}


class Steady(Behaviour):
    """Long-lived producers: one PID each, for ever."""

    kind = "steady"

    def plan(self, a, b, cluster):
        if not self.segments and a == self.origin:
            period = self.params["period_ms"]
            for k in range(self.params["producers"]):
                pid, t = self._new_pid(cluster, a)
                phase = int(self.rng.integers(period))
                self.segments.append(
                    Segment(
                        pid,
                        0,
                        t,
                        FOREVER,
                        period,
                        phase,
                        f"{self.principal[5:]}-{k}",
                        self._partition(cluster),
                    )
                )


class CrashLoop(Behaviour):
    """One client that crashes and restarts: a new producer every ``every_ms`` (+-20%)."""

    kind = "crash-loop"

    def __init__(self, *args, **params):
        super().__init__(*args, **params)
        self.next_start = self.origin

    def _gap(self) -> int:
        every = self.params["every_ms"]
        return max(1, int(every * self.rng.uniform(0.8, 1.2)))

    def plan(self, a, b, cluster):
        while self.next_start < b:
            start = self.next_start
            end = start + self._gap()
            pid, t = self._new_pid(cluster, start)
            period = self.params["period_ms"]
            self.segments.append(
                Segment(pid, 0, t, max(end, t + 1), period, t % period, self.kind, self._partition(cluster))
            )
            self.next_start = end


class PerError(CrashLoop):
    """A client that opens a new producer on every error (errors at random, mean ``every_ms``)."""

    kind = "per-error"

    def _gap(self) -> int:
        return max(1, int(self.rng.exponential(self.params["every_ms"])))


class PerBatch(Behaviour):
    """A new producer for every batch: one request per PID, a batch every ``every_ms``."""

    kind = "per-batch"

    def __init__(self, *args, **params):
        super().__init__(*args, **params)
        self.next_start = self.origin

    def plan(self, a, b, cluster):
        every = self.params["every_ms"]
        while self.next_start < b:
            pid, t = self._new_pid(cluster, self.next_start)
            self.segments.append(Segment(pid, 0, t, t + 1, 1, 0, self.kind, self._partition(cluster)))
            self.next_start += every


class Transactional(Behaviour):
    """Transactional producers (KIP-360): the PID stays, re-initialising bumps the epoch.

    Every ``reinit_ms`` (+-50%) a producer re-initialises. With
    ``retry_p`` the bump's response is lost and the producer retries with its
    old epoch, getting the same new epoch back. With ``restart_p`` the
    application restarts instead: the new instance's InitProducerId fences
    the old one, whose next produce request fails with INVALID_PRODUCER_EPOCH
    and which sends nothing more.
    """

    kind = "transactional"

    def __init__(self, *args, **params):
        super().__init__(*args, **params)
        self.next_reinit: dict[str, int] = {}
        self.current: dict[str, Segment] = {}
        self.fenced = self.retries = self.bumps = 0

    def _gap(self) -> int:
        return int(self.params["reinit_ms"] * self.rng.uniform(0.5, 1.5))

    def plan(self, a, b, cluster):
        coord, period = cluster.coordinator, self.params["period_ms"]
        if not self.current and a == self.origin:
            for k in range(self.params["producers"]):
                txn = f"{self.principal[5:]}-txn-{k}"
                pid, epoch, t = coord.init_producer_id(txn, cluster.any_broker(self.rng), a)
                self.pids.add(pid)
                seg = Segment(pid, epoch, t, FOREVER, period, int(self.rng.integers(period)), txn, k, txn)
                self.segments.append(seg)
                self.current[txn] = seg
                self.next_reinit[txn] = t + self._gap()
        for txn in sorted(self.current):
            while self.next_reinit[txn] < b:
                t = self.next_reinit[txn]
                old = self.current[txn]
                broker = cluster.any_broker(self.rng)
                if self.rng.random() < self.params["restart_p"]:
                    pid, epoch, t = cluster.coordinator.init_producer_id(txn, broker, t, epoch=None)
                    try:  # the zombie's next request
                        cluster.coordinator.check_produce(txn, old.epoch)
                    except InvalidProducerEpochError:
                        self.fenced += 1
                else:
                    pid, epoch, t = cluster.coordinator.init_producer_id(txn, broker, t, epoch=old.epoch)
                    if self.rng.random() < self.params["retry_p"]:
                        again = cluster.coordinator.init_producer_id(txn, broker, t, epoch=old.epoch)
                        if again[:2] != (pid, epoch):  # KIP-360: a retry must not bump twice
                            raise AssertionError(f"retry changed the epoch: {again} != {(pid, epoch)}")
                        self.retries += 1
                self.bumps += 1
                old.end = t
                self.pids.add(pid)
                seg = Segment(pid, epoch, t, FOREVER, period, old.phase, txn, old.partition, txn)
                self.segments.append(seg)
                self.current[txn] = seg
                self.next_reinit[txn] = t + self._gap()

    def summary(self):
        return {
            **super().summary(),
            "epoch_bumps": self.bumps,
            "init_retries": self.retries,
            "fenced": self.fenced,
        }


class Legacy(Behaviour):
    """Non-idempotent clients: PID -1."""

    kind = "legacy"

    def plan(self, a, b, cluster):
        if not self.segments and a == self.origin:
            period = self.params["period_ms"]
            for k in range(self.params["producers"]):
                phase = int(self.rng.integers(period))
                self.segments.append(
                    Segment(-1, -1, a, FOREVER, period, phase, f"legacy-{k}", self._partition(cluster))
                )


class Returning(Behaviour):
    """Producers active for ``active_ms``, idle for ``idle_ms`` (longer than the
    quota window, so they are forgotten), then back with the same PID."""

    kind = "returning"

    def __init__(self, *args, **params):
        super().__init__(*args, **params)
        self.producers: list[tuple[int, int, int]] = []  # pid, phase, partition
        self.next_cycle = self.origin

    def plan(self, a, b, cluster):
        period, active, idle = self.params["period_ms"], self.params["active_ms"], self.params["idle_ms"]
        if not self.producers and a == self.origin:
            for _ in range(self.params["producers"]):
                pid, _t = self._new_pid(cluster, a)
                self.producers.append((pid, int(self.rng.integers(period)), self._partition(cluster)))
        while self.next_cycle < b:
            start = self.next_cycle
            for k, (pid, phase, part) in enumerate(self.producers):
                self.segments.append(
                    Segment(pid, 0, start, start + active, period, phase, f"returning-{k}", part)
                )
            self.next_cycle = start + active + idle


class RollingDeploy(Behaviour):
    """``producers`` long-lived instances, redeployed every ``deploy_ms`` (the first at a
    random time within it): one after another, ``stagger_ms`` apart, each instance stops
    and its successor starts with a new PID. Example: 10 producers, deploys every 3 h,
    30 s apart: 10 new PIDs in 5 minutes every 3 hours, each PID living 3 hours."""

    kind = "rolling-deploy"

    def __init__(self, *args, **params):
        super().__init__(*args, **params)
        self.current: list[Segment] = []
        self.next_deploy = self.origin + int(self.rng.integers(1, self.params["deploy_ms"] + 1))

    def _start(self, cluster: Cluster, k: int, at: int, phase: int, partition: int) -> Segment:
        pid, t = self._new_pid(cluster, at)
        client = f"{self.principal[5:]}-{k}"
        seg = Segment(pid, 0, t, FOREVER, self.params["period_ms"], phase, client, partition)
        self.segments.append(seg)
        return seg

    def plan(self, a, b, cluster):
        if not self.current and a == self.origin:
            for k in range(self.params["producers"]):
                phase = int(self.rng.integers(self.params["period_ms"]))
                self.current.append(self._start(cluster, k, a, phase, self._partition(cluster)))
        while self.next_deploy < b:
            for k, old in enumerate(self.current):
                at = max(old.start + 1, self.next_deploy + k * self.params["stagger_ms"])
                old.end = at
                self.current[k] = self._start(cluster, k, at, old.phase, old.partition)
            self.next_deploy += self.params["deploy_ms"]


class Autoscale(Behaviour):
    """Instances that come and go: about ``producers`` at a time, each living between
    ``min_life_ms`` and ``max_life_ms`` (log-uniform), started at random (Poisson, so
    that as many start as stop). Each instance is a new PID. Example: 8 producers living
    10 min to 3 h (mean about 63 min): about 7.6 new PIDs an hour."""

    kind = "autoscale"

    def __init__(self, *args, **params):
        super().__init__(*args, **params)
        self.next_start = self.origin
        self.started = 0

    def _life(self) -> int:
        lo = self.params["min_life_ms"]
        hi = max(lo, self.params["max_life_ms"])
        return int(np.exp(self.rng.uniform(np.log(lo), np.log(hi))))

    def _mean_life(self) -> float:
        lo, hi = self.params["min_life_ms"], self.params["max_life_ms"]
        return (hi - lo) / np.log(hi / lo) if hi > lo else float(lo)

    def _start(self, cluster: Cluster, at: int, life: int) -> None:
        pid, t = self._new_pid(cluster, at)
        period = self.params["period_ms"]
        client = f"{self.principal[5:]}-{self.started}"
        self.started += 1
        phase, partition = int(self.rng.integers(period)), self._partition(cluster)
        self.segments.append(Segment(pid, 0, t, t + max(1, life), period, phase, client, partition))

    def plan(self, a, b, cluster):
        if a == self.origin and not self.started:  # the instances already up, part-way through their lives
            for _ in range(self.params["producers"]):
                self._start(cluster, a, int(self._life() * self.rng.uniform(0, 1)))
            self.next_start = a + self._gap()
        while self.next_start < b:
            self._start(cluster, self.next_start, self._life())
            self.next_start += self._gap()

    def _gap(self) -> int:
        return max(1, int(self.rng.exponential(self._mean_life() / self.params["producers"])))


BEHAVIOURS = {
    cls.kind: cls
    for cls in (
        Steady,
        CrashLoop,
        PerError,
        PerBatch,
        Transactional,
        Legacy,
        Returning,
        RollingDeploy,
        Autoscale,
    )
}
# Behaviours whose request rate --rate sets (the rest have rates of their own).
WELL_BEHAVED = ("steady", "transactional", "legacy", "returning", "rolling-deploy", "autoscale")
