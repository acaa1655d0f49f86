"""Prometheus metrics from the driver: per user (KIP-936's ``ProducerIds`` group) and the query's health.

The sink hands every batch's rows to :meth:`Exporter.observe_batch`, and the
CLI's wait loop hands Spark's progress to :meth:`Exporter.observe_progress`.
Spark-free: the clock is a parameter. Names and meanings are in docs/observability.md
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

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry, Counter, Gauge

import pidquota.formats as formats
from pidquota.conf.errors import ConfigError
from pidquota.quota.user_state import UserState, finite
from pidquota.streaming.reasons import REASON_CLASSES, reason_class

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
    from it. A throttled user keeps its label until ``keep_ms`` of event time
    (the window W) has passed without a throttle; then it is an ordinary
    labelled user again. While there is room, a new user gets a label. When
    there is none, a folded user takes the label of the weakest labelled,
    unprotected user only once its score is more than ``margin`` times that
    user's: the margin keeps two similar users from swapping labels every
    batch, and each swap ends a series.

    Example, ``max_users=2``: batch 1 has A (10 new PIDs) and B (3): both are
    labelled. Batch 2 has C (5): 5 <= 2 x 3, so C is folded into ``_other``.
    Batch 3 has C again (total 8 > 6): C takes B's label and B is folded.
    Batch 4 has D, throttled at t: D is labelled too, making 3 labels, and D
    cannot be folded before t + W.
    """

    def __init__(self, max_users: int, margin: float = 2.0, keep_ms: float = math.inf):
        self.max_users = max_users
        self.margin = margin
        self.keep_ms = keep_ms
        self.score: dict[str, float] = {}
        self.labelled: set[str] = set()
        self.protected: dict[str, float] = {}  # user: event time of its last throttle

    def update(
        self, batch: Iterable[tuple[str, float, bool]], now_ms: float = 0.0
    ) -> tuple[list[str], list[str]]:
        """Take one batch's ``(user, new PIDs, throttled)`` as of event time ``now_ms``; return
        (newly labelled, demoted)."""
        added: list[str] = []
        candidates = []
        for user, new_pids, throttled in batch:
            self.score[user] = self.score.get(user, 0.0) + new_pids
            if throttled:
                if user not in self.labelled:
                    self.labelled.add(user)
                    added.append(user)
                self.protected[user] = now_ms
            elif user not in self.labelled:
                candidates.append(user)
        for user in [u for u, t in self.protected.items() if now_ms - t > self.keep_ms]:
            del self.protected[user]  # quiet for W: it may be folded again
        candidates.sort(key=lambda u: -self.score[u])
        demoted = self._fill(candidates, added)
        return added, demoted

    def _fill(self, candidates: list[str], added: list[str]) -> list[str]:
        weakest = [(self.score[u], u) for u in self.labelled - self.protected.keys()]
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
        self.labels = UserLabels(max_users, keep_ms=window_ms)
        self._until: dict[str, float] = {}  # labelled users throttled: until when (event time)
        self.clock = clock
        # every user's latest _SUMMED values: _other carries their sums over the folded users
        self._last = pd.DataFrame(columns=list(_SUMMED), dtype=float)
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
        self.admitted = Counter(
            "pidquota_producer_ids_admitted",
            "New PIDs admitted (each once: an admitted PID is known from then on)",
            ["user"],
            registry=reg,
        )
        self.throttled = Counter(
            "pidquota_producer_ids_throttled",
            "THROTTLE decisions: sightings of unknown PIDs refused; a refused PID seen again counts "
            "again (distinct throttled PIDs: pidquota report)",
            ["user"],
            registry=reg,
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
        self.skipped = Counter(
            "pidquota_input_skipped",
            "Input of no interest, by kind: the request log's other API keys, refused inits",
            ["what"],
            registry=reg,
        )
        for fmt in formats.every():  # a format's lines of another kind show at 0 until input is skipped
            if fmt.foreign:
                self.skipped.labels(fmt.foreign)
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
        self.actions = Counter(
            "pidquota_actuator_actions",
            "The actuator's actions on the cluster's controls (docs/enforcing.md), by action: apply, "
            "extend, undo, keep, left (changed by someone else, left as it is), skipped, failed",
            ["action"],
            registry=reg,
        )
        for action in ("apply", "undo", "failed"):
            self.actions.labels(action)  # shows at 0 until it happens
        self.acted = Gauge(
            "pidquota_actuator_principals",
            "Principals the actuator acts on now (0 when it is off)",
            registry=reg,
        )
        self.users = Gauge(
            "pidquota_prometheus_users",
            "Users with their own label, and users summed into _other",
            ["kind"],
            registry=reg,
        )

    def observe_batch(self, batch_id: int, frames: dict[str, pd.DataFrame]) -> None:
        """One batch's output rows (the sink's ``on_batch``). Column-wise: a batch of 100k users
        costs tens of ms; only labelled users are looked at one by one."""
        metrics, dead = frames["metrics"], frames["dead-letters"]
        events = int(_numbers(metrics, "events").sum()) + len(dead)
        self.events.inc(events)
        self._recent.append((self.clock(), events))
        self.batch_id.set(batch_id)
        if len(dead):
            for reason, n in dead["reason"].map(reason_class).value_counts().items():
                self.dead.labels(reason).inc(int(n))
        skipped = frames.get("skipped")
        if skipped is not None and len(skipped):
            for key, n in zip(skipped["what"], skipped["count"], strict=True):
                self.skipped.labels(str(key)).inc(int(n))
        actions = frames.get("actions")
        if actions is not None and len(actions):
            for action, n in actions["action"].value_counts().items():
                self.actions.labels(str(action)).inc(int(n))
        if not len(metrics):
            return
        self._newest_ms = max(self._newest_ms or 0, float(_numbers(metrics, "timestamp").max()))
        self._observe_users(metrics, batch_id)
        self.stale.set(1 if _flags(metrics, "quota_stale").any() else 0)
        failed = int(_numbers(metrics, "failed_publishes").max())
        if failed > self._failed:
            self.failed.inc(failed - self._failed)
            self._failed = failed

    def _observe_users(self, m: pd.DataFrame, batch_id: int) -> None:
        users = m["principal"].astype(str).to_numpy()
        replayed = _flags(m, "replay")  # only rebuilt state (--replay-until): not counted
        admitted, throttled = _numbers(m, "admitted"), _numbers(m, "throttled")
        throttling, until = self._throttling(m, batch_id)
        flagged = (throttled > 0) | (throttling & ~replayed)
        added, demoted = self.labels.update(
            zip(users, admitted + throttled, flagged, strict=True), self._newest_ms
        )
        for user in demoted:  # its series end; from now on it is summed into _other
            for metric in (*self.gauges.values(), self.admitted, self.throttled):
                _remove(metric, user)
            self._until.pop(user, None)
        own = pd.Series(users).isin(self.labels.labelled).to_numpy()
        counted = ~replayed
        rows = own.nonzero()[0]
        for i, row in zip(rows, m.iloc[rows].to_dict("records"), strict=True):
            self._set_user(row, users[i], bool(throttling[i]), bool(counted[i]))
            self._until.pop(users[i], None)
            if throttling[i]:
                self._until[users[i]] = until[i]
        self._unthrottle_quiet(set(users))
        rest = ~own
        if rest.any():
            self.admitted.labels(OTHER).inc(int(admitted[rest & counted].sum()))
            self.throttled.labels(OTHER).inc(int(throttled[rest & counted].sum()))
        latest = pd.DataFrame({k: _numbers(m, k).to_numpy() for k in _SUMMED}, index=users)
        kept = self._last[~self._last.index.isin(users)]
        self._last = pd.concat([kept, latest]) if len(kept) else latest
        folded = self._last[~self._last.index.isin(self.labels.labelled)]
        if len(folded):
            for key, total in folded.sum().items():
                self.gauges[key].labels(OTHER).set(float(total))
        self.users.labels("labelled").set(len(self.labels.labelled))
        self.users.labels("folded").set(len(folded))

    def _throttling(self, m: pd.DataFrame, batch_id: int) -> tuple[np.ndarray, np.ndarray]:
        """Per row: is a new PID of the user throttled now (the answer ``pidquota status`` gives),
        and until when (event time)? Only rows with less than a token left can be, so only those
        are asked one by one."""
        out, until = np.zeros(len(m), dtype=bool), np.zeros(len(m))
        maybe = ((_numbers(m, "tokens", np.inf) < 1) & (_numbers(m, "quota") > 0)).to_numpy().nonzero()[0]
        for i, row in zip(maybe, m.iloc[maybe].to_dict("records"), strict=True):
            state = UserState.from_metrics(row, batch_id, self.window_ms)
            out[i] = state is not None and state.throttled
            until[i] = state.throttled_until_ms if out[i] else 0
        return out, until

    def _unthrottle_quiet(self, seen: set[str]) -> None:
        """A throttled user with no events since: its throttle ends at the time the bucket said,
        measured by the newest event time of any user (a user's own time stands still while it
        is quiet)."""
        for user in [u for u, t in self._until.items() if t <= self._newest_ms and u not in seen]:
            del self._until[user]
            if user in self.labels.labelled:
                self.gauges["throttled_now"].labels(user).set(0)

    def _set_user(self, row: dict, user: str, throttling: bool, counted: bool) -> None:
        """A labelled user's gauges from its row; its counters, unless the row was replayed."""
        values = {k: finite(row.get(k)) for k in _USER_GAUGES if k in row}
        values["throttled_now"] = 1 if throttling else 0
        if values.get("quota") is not None and values["quota"] <= 0:
            values["quota"] = None  # unlimited
        for key, value in values.items():
            if value is None:
                _remove(self.gauges[key], user)
            else:
                self.gauges[key].labels(user).set(value)
        self.admitted.labels(user).inc(_count(row, "admitted") if counted else 0)
        self.throttled.labels(user).inc(_count(row, "throttled") if counted else 0)

    def watch_actuator(self, acted: Callable[[], int]) -> None:
        """``pidquota_actuator_principals`` reads ``acted()`` at each scrape."""
        self.acted.set_function(acted)

    def watch_plugin(self, verdicts: Callable[[], list]) -> None:
        """``pidquota_plugin_broker_obeys{broker}`` reads ``verdicts()`` at each scrape: 1 for a
        broker whose plug-in obeys pidquota's state, 0 for one that does not (a broker not yet
        judged has no sample); ``actuate/obedience.py`` says how it is judged."""
        self.registry.register(_Obedience(verdicts))

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


def _numbers(frame: pd.DataFrame, column: str, missing: float = 0.0) -> pd.Series:
    """A column as floats, nulls (and a missing column) as ``missing``."""
    if column not in frame:
        return pd.Series(missing, index=frame.index, dtype=float)
    return pd.to_numeric(frame[column], errors="coerce").astype(float).fillna(missing)


def _flags(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A boolean column as a numpy array, nulls (and a missing column) as False."""
    if column not in frame:
        return np.zeros(len(frame), dtype=bool)
    values = frame[column].to_numpy(dtype=object)
    return np.where(pd.isna(values), False, values).astype(bool)


def _count(row: dict, key: str) -> int:
    return int(finite(row.get(key)) or 0)


def _remove(metric, *labels: str) -> None:
    with contextlib.suppress(KeyError):  # no such series
        metric.remove(*labels)


class _Obedience:
    """A collector of the brokers' obedience, asked at each scrape."""

    def __init__(self, verdicts: Callable[[], list]):
        self.verdicts = verdicts

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily(
            "pidquota_plugin_broker_obeys",
            "1 while the broker's plug-in obeys pidquota's state (its report fresh, obeying, of this "
            "run's heartbeat), 0 while it does not: pidquota's throttles do not bind there",
            labels=["broker"],
        )
        for verdict in self.verdicts():
            if verdict.obeys is not None:
                family.add_metric([str(verdict.broker)], 1.0 if verdict.obeys else 0.0)
        yield family
