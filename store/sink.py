"""Publishing each micro-batch's throttle state to Redis from the sink."""

from __future__ import annotations

import logging
from dataclasses import replace

from pidquota.conf.errors import PidquotaError
from pidquota.quota.resolver import QuotaSource, resolve
from pidquota.quota.user_state import UserState
from pidquota.store.decisions import FENCED, DecisionStore, WriteResult

log = logging.getLogger("pidquota.redis")


class RedisPublisher:
    """``publish(batch_id, frames)`` for :class:`pidquota.streaming.outputs.sink.JsonlSink`.

    Each batch publishes, per user in its metrics rows, one hash in that
    user's event time (:class:`pidquota.quota.user_state.UserState`), in one fenced write
    (:class:`DecisionStore`). The fence is per query: ``query_id`` is Spark's
    ``StreamingQuery.id``, which the checkpoint keeps across restarts (the sink
    binds it from the first batch, so the checkpoint may be on any filesystem);
    this run takes a new writer generation before its first write, so an older
    run of the same query (a zombie) is refused.

    * **Quota changes.** Users whose last state was throttled are kept here
      (only those). If a user's quota in ``quotas`` no longer equals the
      published one, the state is recomputed with ``TokenBucket.set_rate``
      and published with the next batch, even if the user sent nothing.
      Example: throttled at quota 2 (tokens 0); raised to 1000: published
      next batch with quota 1000, tokens 998, not throttled.
    * **Outages.** A Redis error never stops the query: ``failed_publishes``
      counts failed batches, ``stale`` is True until a write succeeds, and the
      newest state of each user not yet written (newest batch wins) goes out
      with the next batch that succeeds. One warning when it starts, one when
      it ends. Example: batches 10-29 fail, 30 succeeds: failed_publishes =
      20, and batch 30 writes every user's state from 10-30, each at its
      newest batch.
    """

    def __init__(
        self, store: DecisionStore, quotas: QuotaSource, window_ms: int, query_id: str | None = None
    ) -> None:
        self.store, self.quotas, self.window_ms = store, quotas, int(window_ms)
        self._query_id = query_id
        self.generation: int | None = None  # taken lazily, before the first write
        self.fenced = 0
        self.failed_publishes = 0
        self.stale = False
        self._failed_at_outage = 0
        self._pending: dict[str, UserState] = {}  # newest state not yet written, per user
        self._throttled: dict[str, UserState] = {}  # last state of users that were throttled
        self._refusals_warned: set[str] = set()

    @property
    def query_id(self) -> str:
        if self._query_id is None:
            raise PidquotaError(
                "the Redis publisher is not bound to a streaming query yet; the sink binds it "
                "(RedisPublisher.bind) with the query id of its first batch"
            )
        return self._query_id

    @property
    def bound(self) -> bool:
        return self._query_id is not None

    def bind(self, query_id: str) -> None:
        """Publish for this query (Spark's ``StreamingQuery.id``, the same across restarts)."""
        self._query_id = query_id

    def __call__(self, batch_id: int, frames: dict) -> None:
        import redis

        states = self._batch_states(batch_id, frames.get("metrics"))
        states.update(self._requoted(batch_id, states))
        self._remember(states)
        # After an outage Redis may be back empty: every throttled user's newest state is
        # written again, not only the users with news since (a silent one would vanish).
        todo = _newest(self._throttled if self.stale else {}, self._pending, states)
        query_id = self.query_id  # a missing checkpoint is a bug, not an outage: it raises
        try:
            if self.generation is None:
                self.generation = self.store.begin(query_id)
            result = self.store.write(query_id, self.generation, batch_id, list(todo.values()))
        except (redis.RedisError, OSError) as exc:
            self._failed(exc, todo)
            return
        self._succeeded()
        if not result.applied:
            self._refused(batch_id, result)

    def _batch_states(self, batch_id: int, metrics) -> dict[str, UserState]:
        rows = [] if metrics is None else metrics.to_dict("records")
        out: dict[str, UserState] = {}
        for row in rows:
            state = UserState.from_metrics(row, batch_id, self.window_ms)
            if state is not None and (
                state.principal not in out or state.now_ms >= out[state.principal].now_ms
            ):
                out[state.principal] = state
        return out

    def _requoted(self, batch_id: int, states: dict) -> dict[str, UserState]:
        """Throttled users without rows in this batch whose quota changed since."""
        if not self._throttled:
            return {}
        quotas = self.quotas.snapshot()
        out = {}
        for principal, state in self._throttled.items():
            quota = resolve(quotas, principal)
            if principal not in states and quota != state.quota:
                out[principal] = state.requoted(quota, batch_id)
        return out

    def _remember(self, states: dict) -> None:
        for principal, state in list(states.items()):
            known = self._throttled.get(principal)
            if state.client is None and known is not None and known.client is not None:
                states[principal] = state = replace(state, client=known.client)  # a batch of known PIDs
            if state.throttled:
                self._throttled[principal] = state
            else:
                self._throttled.pop(principal, None)

    def _failed(self, exc: BaseException, todo: dict) -> None:
        self.failed_publishes += 1
        self._pending = todo
        if not self.stale:
            self.stale = True
            self._failed_at_outage = self.failed_publishes - 1
            log.warning(
                "cannot publish throttle state to Redis (%s: %s); the query goes on, and each user's "
                "newest state is published when Redis is back",
                type(exc).__name__,
                exc,
            )

    def _succeeded(self) -> None:
        if self.stale:
            log.warning(
                "Redis is back: throttle state is published again after %d failed publish(es); "
                "caught up %d user(s)",
                self.failed_publishes - self._failed_at_outage,
                len(_newest(self._throttled, self._pending)),
            )
        self.stale = False
        self._pending = {}

    def _refused(self, batch_id: int, result: WriteResult) -> None:
        self.fenced += 1
        if result.status in self._refusals_warned:
            return
        self._refusals_warned.add(result.status)
        if result.status == FENCED:
            log.warning(
                "query %s: this writer (generation %d) was fenced off by generation %d, a newer run of "
                "the same query; batch %d and later are not published by this instance (stop it)",
                self.query_id,
                self.generation,
                result.generation,
                batch_id,
            )
        else:
            log.warning(
                "query %s: batch %d is older than batch %d already published; not applied",
                self.query_id,
                batch_id,
                result.batch,
            )


def _newest(*states: dict[str, UserState]) -> dict[str, UserState]:
    """Per user, the state of the newest batch among ``states`` (a later map wins a tie)."""
    out: dict[str, UserState] = {}
    for each in states:
        for principal, state in each.items():
            if principal not in out or state.batch_id >= out[principal].batch_id:
                out[principal] = state
    return out
