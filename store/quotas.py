"""Quotas in Redis: the kafka-configs-style store, and the enforcer's cached reader."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping

from pidquota.conf.errors import ConfigError
from pidquota.quota.resolver import QUOTA_KEY, validate_rate
from pidquota.store.keys import Keys, desanitize

log = logging.getLogger("pidquota.quotas")


class RedisQuotaStore:
    """``/config/users/<user>`` and ``/config/users/<default>`` as Redis hashes.

    Every change writes the entity's hash, the entity index and the config
    version in one MULTI/EXEC, so a reader never sees half a change. It also
    sets ``{P}:config:generation`` to a random token if it is missing, so the
    store's content always comes with a generation: a reader that knew
    generation ``g`` and finds none learns that Redis was emptied (restarted
    without persistence, or flushed), which is not the same as
    ``--delete-config``. Example: alter (version 1, generation ``ab12``),
    delete (version 2, generation ``ab12``: the deletion applies), FLUSHALL
    (no version, no generation: keep the last known quotas), alter again
    (version 1, generation ``9f3c``: reload).
    """

    KNOWN = (QUOTA_KEY,)

    def __init__(self, client, prefix: str = "pidquota") -> None:
        self.client = client
        self.keys = Keys(prefix)

    def alter(
        self, entity: str, add: Mapping[str, object] | None = None, delete: list[str] | None = None
    ) -> list[str]:
        """Set ``add`` and remove ``delete`` for ``entity``, in one transaction. Returns the keys of
        ``delete`` that were not set: removing them is no change (as with kafka-configs.sh, so
        scripts that delete can be run twice)."""
        add, delete = dict(add or {}), list(delete or [])
        missing: list[str] = []
        for key in [*add, *delete]:
            if key not in self.KNOWN:
                raise ConfigError(f"Invalid config(s): {key}. The only user config is {QUOTA_KEY}")
        values = {k: validate_rate(entity, v) for k, v in add.items()}
        hkey = self.keys.user_config(entity)
        member = hkey.rsplit(":", 1)[1]

        def change(pipe) -> None:  # runs under WATCH hkey; retried if someone else changes it
            existing = {k.decode() for k in pipe.hkeys(hkey)}
            missing[:] = [k for k in delete if k not in existing and k not in values]
            left = (existing | set(values)) - set(delete)
            pipe.multi()
            if values:
                pipe.hset(hkey, mapping={k: repr(float(v)) for k, v in values.items()})
            if delete:
                pipe.hdel(hkey, *delete)
            if left:
                pipe.sadd(self.keys.users_index, member)
            else:
                pipe.srem(self.keys.users_index, member)
            pipe.incr(self.keys.config_version)  # readers reload on the next check
            pipe.set(self.keys.config_generation, secrets.token_hex(8), nx=True)

        self.client.transaction(change, hkey)
        return missing

    def describe(self, entity: str) -> dict[str, float]:
        raw = self.client.hgetall(self.keys.user_config(entity))
        return {k.decode(): float(v) for k, v in raw.items()}

    def entities(self) -> list[str]:
        return sorted(desanitize(n.decode()) for n in self.client.smembers(self.keys.users_index))

    def snapshot(self) -> dict[str, float]:
        """``{entity: producer_ids_rate}`` for every entity that has one."""
        names = [n.decode() for n in self.client.smembers(self.keys.users_index)]
        with self.client.pipeline(transaction=False) as p:
            for n in names:
                p.hget(self.keys.user_config(desanitize(n)), QUOTA_KEY)
            values = p.execute()
        out = {}
        for n, v in zip(names, values, strict=True):
            if v is not None:
                out[desanitize(n)] = validate_rate(desanitize(n), v.decode())
        return out

    def version(self) -> int:
        return self.marker()[0]

    def generation(self) -> str | None:
        return self.marker()[1]

    def marker(self) -> tuple[int, str | None]:
        """``(version, generation)`` in one round trip; ``(0, None)`` for an empty store."""
        version, generation = self.client.mget(self.keys.config_version, self.keys.config_generation)
        return int(version or 0), None if generation is None else generation.decode()


class RedisQuotas:
    """The enforcer's :class:`QuotaSource` on Redis, cached per process.

    ``snapshot()`` is called for every principal of every micro-batch; it
    costs one MGET of the config version and generation at most every
    ``refresh_ms``, and a reload only when one of them moved. The last known
    quotas stay in force (never "everyone unlimited", never "everyone
    throttled") and ``stale`` is True while either

    * Redis does not answer (one warning when it stops, one when it is back), or
    * the store was emptied: the reader knew generation ``g`` and Redis now
      has none (a restart without persistence). It warns at most once every
      ``EMPTIED_WARNING_S`` until an operator re-applies the quotas (a new
      generation), then reloads and says so once.

    A deliberate ``configs --delete-config`` bumps the version while the
    generation stays, so it takes effect. Example, refresh 1 s: quotas
    ``{User:a: 10}`` at generation ``ab12``; FLUSHALL; the next check finds
    ``(0, None)``: ``User:a`` keeps 10, ``stale`` is True, one warning per
    minute; ``configs --alter`` sets 20 (generation ``9f3c``): reload, 20.
    A reader that never knew a generation (an empty store at start-up) has
    no quotas and nothing to warn about. It is pickled to the executors with
    the quotas read at start-up.

    Warnings come from the driver's reader alone, so an outage is one warning
    however many Python workers notice it: a copy pickled to the executors is
    ``quiet`` (it logs at DEBUG), and ``pidquota run`` refreshes the driver's
    reader after every micro-batch.
    """

    EMPTIED_WARNING_S = 60.0
    clock = staticmethod(time.monotonic)

    def __init__(
        self,
        url: str,
        auth: dict,
        prefix: str,
        initial: Mapping[str, float],
        version: int,
        refresh_ms: int,
        generation: str | None = None,
    ):
        self.url, self.auth, self.prefix, self.refresh_ms = url, dict(auth), prefix, refresh_ms
        self._quotas, self._version, self._generation = dict(initial), version, generation
        self._checked = None
        self._unreachable = False
        self._emptied_warned: float | None = None  # clock() of the last "emptied" warning
        self.stale = False
        self._store = None
        self.quiet = False  # a copy on the executors: the driver's reader does the warning

    @classmethod
    def load(cls, store: RedisQuotaStore, url: str, auth: dict, refresh_ms: int) -> RedisQuotas:
        """A reader with ``store``'s current quotas (version and generation read first)."""
        version, generation = store.marker()
        return cls(url, auth, store.keys.prefix, store.snapshot(), version, refresh_ms, generation)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_store"] = None
        state["quiet"] = True  # unpickled on an executor
        return state

    def _warn(self, message: str, *args) -> None:
        (log.debug if self.quiet else log.warning)(message, *args)

    def _connect(self) -> RedisQuotaStore:
        if self._store is None:
            from pidquota.store.client import connect

            self._store = RedisQuotaStore(connect(self.url, timeout_s=0.5, **self.auth), self.prefix)
        return self._store

    def snapshot(self) -> Mapping[str, float]:
        now = self.clock()
        if self._checked is None or (now - self._checked) * 1000 >= self.refresh_ms:
            self._checked = now
            self._refresh()
        return self._quotas

    def _refresh(self) -> None:
        import redis

        try:
            store = self._connect()
            version, generation = store.marker()
            if generation is None and self._generation is not None:
                self._emptied()
            elif (version, generation) != (self._version, self._generation):
                self._reload(store.snapshot(), version, generation)
            else:
                self._live()
        except (redis.RedisError, OSError, ConfigError) as exc:
            self._store = None
            if not self._unreachable:
                self._warn("Redis unreachable, keeping the last known quotas: %s", type(exc).__name__)
            self._unreachable = self.stale = True

    def _reload(self, quotas: dict, version: int, generation: str | None) -> None:
        if self._emptied_warned is not None:
            self._warn(
                "Redis quotas were re-applied (generation %s): %d quota(s) live again",
                generation,
                len(quotas),
            )
            self._emptied_warned = None
        self._quotas, self._version, self._generation = quotas, version, generation
        self._live()

    def _live(self) -> None:
        if self._unreachable:
            self._warn("Redis is back; quotas are live again (version %d)", self._version)
        self._unreachable = self.stale = False

    def _emptied(self) -> None:
        if self._unreachable:
            self._warn("Redis is back, but its quota store is empty")
        self._unreachable, self.stale = False, True
        now = self.clock()
        if self._emptied_warned is None or now - self._emptied_warned >= self.EMPTIED_WARNING_S:
            self._emptied_warned = now
            self._warn(
                "Redis lost its quota store (generation %s is gone: restarted without persistence, or "
                "flushed); keeping the last known %d quota(s) until an operator re-applies them with "
                "`pidquota configs --alter`",
                self._generation,
                len(self._quotas),
            )


def quota_source(config):
    """What ``pidquota run`` enforces from its settings: the quota file, or live quotas from Redis
    plus the fenced publisher of throttle state (None when publishing is off or there is no Redis)."""
    from pidquota.quota import QuotaSettings, StaticQuotas

    url = config["pidquota.redis.url"]
    if not url:
        return StaticQuotas.from_file(config.quotas_path()), None
    from pidquota.store.client import auth_kwargs, connect_config
    from pidquota.store.decisions import DecisionStore
    from pidquota.store.sink import RedisPublisher

    ttl_ms = state_ttl_ms(config)
    client = connect_config(config)  # at start-up: a Redis that is not there is an error now
    prefix = config["pidquota.redis.prefix"]
    store = RedisQuotaStore(client, prefix)
    quotas = RedisQuotas.load(store, url, auth_kwargs(config), config["pidquota.quota.refresh.ms"])
    if not config["pidquota.redis.publish.decisions"]:
        return quotas, None
    window_ms = QuotaSettings.from_config(config).window_ms
    shadow = config["pidquota.mode"] == "shadow"
    store = DecisionStore(client, prefix, shadow, ttl_ms)
    return quotas, RedisPublisher(store, quotas, window_ms)


def state_ttl_ms(config) -> int:
    """``pidquota.redis.state.ttl.ms``, refused if a user's state could expire between two batches."""
    ttl, trigger = config["pidquota.redis.state.ttl.ms"], config["pidquota.trigger.interval.ms"]
    if 0 < ttl < 3 * trigger:
        raise ConfigError(
            f"pidquota.redis.state.ttl.ms={ttl} is less than 3 trigger intervals "
            f"(pidquota.trigger.interval.ms={trigger}): a throttled user's state would expire between "
            f"batches; give at least {3 * trigger}, or 0 to never expire"
        )
    return ttl
