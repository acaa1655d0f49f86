"""Prometheus metrics from the driver: per user (KIP-936's ``ProducerIds`` group) and the query's health.

The sink hands every batch's rows to :meth:`Exporter.observe_batch`, and the
CLI's wait loop hands Spark's progress to :meth:`Exporter.observe_progress`.
Spark-free: the clock is a parameter. Names and meanings are in the README
("Prometheus metrics").

Counters count what this process has seen, so a restart starts them from 0,
the way Prometheus expects of a restarted exporter: ``rate()`` and
``increase()`` treat the drop as a counter reset. (The checkpoint's own totals
survive a restart; they are in the metrics rows as ``admitted_total`` and
``throttled_total``.)
"""

from __future__ import annotations

import contextlib
import heapq
import math
import time
from collections import deque
from collections.abc import Callable, Iterable

import pandas as pd
from prometheus_client import CollectorRegistry, Counter, Gauge

from conf.errors import ConfigError
from store.state import UserState, finite
from streaming.reasons import REASON_CLASSES, reason_class

OTHER = "_other"
# (name, help) of the per-user gauges, set from the user's latest metrics row.
_USER_GAUGES = {
    "rate": (
        "pidquota_producer_ids_rate",
        "New PIDs per window W (KIP-936 rate), as of the user's last batch",
    ),
    "tokens": ("pidquota_producer_ids_tokens", "Token-bucket credit left, in PIDs (KIP-936 tokens)"),
    "throttle_time_ms": (
        "pidquota_producer_ids_throttle_time_ms",
        "Average throttle time of the user's throttled new PIDs, ms (KIP-936 throttle-time)",
    ),
    "quota": ("pidquota_producer_ids_quota", "The user's producer_ids_rate quota, PIDs per W"),
    "throttled_now": ("pidquota_producer_ids_throttling", "1 while a new PID of the user would be throttled"),
    "active_pids_estimate": ("pidquota_active_pids_estimate", "Distinct PIDs remembered (Bloom estimate)"),
    "state_bytes": ("pidquota_state_bytes", "The user's state size, bytes"),
}
# The gauges that add up across users, so ``_other`` carries their sum.
_SUMMED = ("rate", "active_pids_estimate", "state_bytes")
RATE_SPAN_S = 60.0  # input events per second are averaged over this much wall time


class UserLabels:
    """Which users get their own ``user`` label: at most ``max_users``, plus every throttled user.

    A user's score is the new PIDs (admitted + throttled) this process has seen
    from it. A user who is ever throttled keeps a label for good. While there
    is room, a new user gets a label. When there is none, a folded user takes
    the label of the weakest labelled, unthrottled user only once its score is
    more than ``margin`` times that user's: the margin keeps two similar users
    from swapping labels every batch, and each swap ends a series.

    Example, ``max_users=2``: batch 1 has A (10 new PIDs) and B (3): both are
    labelled. Batch 2 has C (5): 5 <= 2 x 3, so C is folded into ``_other``.
    Batch 3 has C again (total 8 > 6): C takes B's label and B is folded.
    Batch 4 has D, throttled: D is labelled too, making 3 labels.
    """

    def __init__(self, max_users: int, margin: float = 2.0):
        self.max_users = max_users
        self.margin = margin
        self.score: dict[str, float] = {}
        self.labelled: set[str] = set()
        self.protected: set[str] = set()  # ever throttled

    def update(self, batch: Iterable[tuple[str, float, bool]]) -> tuple[list[str], list[str]]:
        """Take one batch's ``(user, new PIDs, throttled)``; return (newly labelled, demoted)."""
        added: list[str] = []
        candidates = []
        for user, new_pids, throttled in batch:
            self.score[user] = self.score.get(user, 0.0) + new_pids
            if throttled and user not in self.protected:
                self.protected.add(user)
                if user not in self.labelled:
                    self.labelled.add(user)
                    added.append(user)
            elif user not in self.labelled:
                candidates.append(user)
        candidates.sort(key=lambda u: -self.score[u])
        demoted = self._fill(candidates, added)
        return added, demoted

    def _fill(self, candidates: list[str], added: list[str]) -> list[str]:
        weakest = [(self.score[u], u) for u in self.labelled - self.protected]
        heapq.heapify(weakest)
        demoted = []
        for user in candidates:
            if len(weakest) < self.max_users:  # room among the unthrottled
                self.labelled.add(user)
            elif weakest and self.score[user] > self.margin * weakest[0][0]:
                _, out = heapq.heappop(weakest)
                self.labelled.discard(out)
                demoted.append(out)
                self.labelled.add(user)
            else:
                break  # sorted by score: nobody after this one qualifies either
            heapq.heappush(weakest, (self.score[user], user))
            added.append(user)
        return demoted

    def label(self, user: str) -> str:
        return user if user in self.labelled else OTHER


class Exporter:
    """pidquota's Prometheus metrics, kept in their own registry."""

    def __init__(
        self,
        window_ms: int,
        max_users: int,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.time,
        shadow: bool = False,
    ):
        self.window_ms = window_ms
        self.registry = registry if registry is not None else CollectorRegistry()
        self.labels = UserLabels(max_users)
        self.clock = clock
        self._last: dict[str, tuple[float, ...]] = {}  # a user's latest _SUMMED values
        self._other = dict.fromkeys(_SUMMED, 0.0)  # their sums over the folded users
        self._recent: deque[tuple[float, int]] = deque()  # (wall time, events) of recent batches
        self._started = clock()
        self._newest_ms: float | None = None
        self._failed = 0
        self._server = None
        self._define()
        self.shadow.set(1 if shadow else 0)

    def _define(self) -> None:
        reg = self.registry
        self.gauges = {k: Gauge(n, h, ["user"], registry=reg) for k, (n, h) in _USER_GAUGES.items()}
        self.admitted = Counter("pidquota_producer_ids_admitted", "New PIDs admitted", ["user"], registry=reg)
        self.throttled = Counter(
            "pidquota_producer_ids_throttled", "New PIDs throttled", ["user"], registry=reg
        )
        self.events = Counter("pidquota_input_events", "Events read (dead letters included)", registry=reg)
        rate = Gauge(
            "pidquota_input_events_per_second",
            f"Events per second over the last {RATE_SPAN_S:g} s",
            registry=reg,
        )
        rate.set_function(self._events_per_second)
        self.batch_seconds = Gauge(
            "pidquota_batch_duration_seconds", "The last micro-batch's duration", registry=reg
        )
        self.batch_id = Gauge("pidquota_last_batch_id", "The last micro-batch's id", registry=reg)
        lag = Gauge(
            "pidquota_event_time_lag_seconds", "Wall clock minus the newest event time seen", registry=reg
        )
        lag.set_function(self._lag)
        self.dead = Counter("pidquota_dead_letters", "Dead letters by reason class", ["reason"], registry=reg)
        for reason in REASON_CLASSES:
            self.dead.labels(reason)  # every class shows, at 0 until it happens
        self.stale = Gauge("pidquota_quota_stale", "1 while the quotas in force may be stale", registry=reg)
        self.failed = Counter(
            "pidquota_failed_publishes", "Throttle-state publishes to Redis that failed", registry=reg
        )
        self.shadow = Gauge(
            "pidquota_shadow",
            "1 when the run is in shadow mode: nothing is published as throttled",
            registry=reg,
        )
        self.users = Gauge(
            "pidquota_prometheus_users",
            "Users with their own label, and users summed into _other",
            ["kind"],
            registry=reg,
        )

    def observe_batch(self, batch_id: int, frames: dict[str, pd.DataFrame]) -> None:
        """One batch's output rows (the sink's ``on_batch``)."""
        metrics, dead = frames["metrics"], frames["dead-letters"]
        rows = metrics.to_dict("records") if len(metrics) else []
        events = int(sum(int(r.get("events") or 0) for r in rows)) + len(dead)
        self.events.inc(events)
        self._recent.append((self.clock(), events))
        self.batch_id.set(batch_id)
        for reason in dead["reason"] if len(dead) else ():
            self.dead.labels(reason_class(reason)).inc()
        if rows:
            self._observe_users(rows, batch_id)
            self.stale.set(1 if any(_flag(r.get("quota_stale")) for r in rows) else 0)
            newest = max(finite(r.get("timestamp")) or 0 for r in rows)
            self._newest_ms = max(self._newest_ms or 0, newest)
            failed = int(max(finite(r.get("failed_publishes")) or 0 for r in rows))
            if failed > self._failed:
                self.failed.inc(failed - self._failed)
                self._failed = failed

    def _observe_users(self, rows: list[dict], batch_id: int) -> None:
        states = {r["principal"]: self._state(r, batch_id) for r in rows}
        batch = [
            (
                r["principal"],
                _count(r, "admitted") + _count(r, "throttled"),
                _count(r, "throttled") > 0 or states[r["principal"]]["throttled_now"] == 1,
            )
            for r in rows
        ]
        added, demoted = self.labels.update(batch)
        for user in demoted:
            self._fold(user)
        for user in added:
            self._unfold(user)
        for r in rows:
            user = r["principal"]
            label = self.labels.label(user)
            replayed = _flag(r.get("replay"))  # only rebuilt state (--replay-until): not counted
            self.admitted.labels(label).inc(0 if replayed else _count(r, "admitted"))
            self.throttled.labels(label).inc(0 if replayed else _count(r, "throttled"))
            self._set_user(user, label, states[user])
        for key in _SUMMED:
            if self._other_users():
                self.gauges[key].labels(OTHER).set(self._other[key])
        self.users.labels("labelled").set(len(self.labels.labelled))
        self.users.labels("folded").set(self._other_users())

    def _state(self, row: dict, batch_id: int) -> dict[str, float | None]:
        """The per-user gauges' values in one metrics row."""
        state = UserState.from_metrics(row, batch_id, self.window_ms)
        values = {k: finite(row.get(k)) for k in _USER_GAUGES if k in row}
        values["throttled_now"] = 1 if state is not None and state.throttled else 0
        if values.get("quota") is not None and values["quota"] <= 0:
            values["quota"] = None  # unlimited
        return values

    def _set_user(self, user: str, label: str, values: dict[str, float | None]) -> None:
        summed = tuple(values.get(k) or 0.0 for k in _SUMMED)
        if label == OTHER:
            old = self._last.get(user, (0.0,) * len(_SUMMED))
            for key, new, was in zip(_SUMMED, summed, old, strict=True):
                self._other[key] += new - was
        else:
            for key, value in values.items():
                if value is None:
                    _remove(self.gauges[key], user)
                else:
                    self.gauges[key].labels(user).set(value)
        self._last[user] = summed

    def _fold(self, user: str) -> None:
        """A demoted user: its series end, its latest values join ``_other``'s sums."""
        for metric in (*self.gauges.values(), self.admitted, self.throttled):
            _remove(metric, user)
        for key, value in zip(_SUMMED, self._last.get(user, ()), strict=False):
            self._other[key] += value

    def _unfold(self, user: str) -> None:
        for key, value in zip(_SUMMED, self._last.get(user, ()), strict=False):
            self._other[key] -= value

    def _other_users(self) -> int:
        return len(self.labels.score) - len(self.labels.labelled)

    def observe_progress(self, progress: dict | None) -> None:
        """Spark's ``query.lastProgress``: the batch's duration."""
        if not progress:
            return
        took = (progress.get("durationMs") or {}).get("triggerExecution")
        if took is not None:
            self.batch_seconds.set(took / 1000)

    def _events_per_second(self) -> float:
        now = self.clock()
        while self._recent and self._recent[0][0] < now - RATE_SPAN_S:
            self._recent.popleft()
        span = min(RATE_SPAN_S, max(now - self._started, 1e-3))
        return sum(n for _, n in self._recent) / span

    def _lag(self) -> float:
        return math.nan if self._newest_ms is None else self.clock() - self._newest_ms / 1000

    def serve(self, host: str, port: int) -> None:
        """Start the HTTP endpoint (a daemon thread) until :meth:`close`; a port in use is a
        :class:`ConfigError`."""
        from prometheus_client import start_http_server

        try:
            self._server, _ = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(
                f"pidquota.prometheus.port {port}: cannot listen on {host}:{port} ({exc.strerror or exc}); "
                "choose a free port with --prometheus-port PORT, or 0 to turn the metrics off"
            ) from None

    def close(self) -> None:
        """Stop serving and free the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _flag(value) -> bool:
    """A boolean column's value; null (None, pandas' NA) is False."""
    return value is not None and value is not pd.NA and bool(value)


def _count(row: dict, key: str) -> int:
    return int(finite(row.get(key)) or 0)


def _remove(metric, *labels: str) -> None:
    with contextlib.suppress(KeyError):  # no such series
        metric.remove(*labels)
