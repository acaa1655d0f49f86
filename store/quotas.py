"""Quotas in Redis: the kafka-configs-style store, and the enforcer's cached reader."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from conf.errors import ConfigError
from quota.resolver import QUOTA_KEY, validate_rate
from store.keys import Keys, desanitize

log = logging.getLogger("pidquota.quotas")


class RedisQuotaStore:
    """``/config/users/<user>`` and ``/config/users/<default>`` as Redis hashes.

    Every change writes the entity's hash, the entity index and the config
    version in one MULTI/EXEC, so a reader never sees half a change.
    """

    KNOWN = (QUOTA_KEY,)

    def __init__(self, client, prefix: str = "pidquota") -> None:
        self.client = client
        self.keys = Keys(prefix)

    def alter(
        self, entity: str, add: Mapping[str, object] | None = None, delete: list[str] | None = None
    ) -> None:
        add, delete = dict(add or {}), list(delete or [])
        for key in [*add, *delete]:
            if key not in self.KNOWN:
                raise ConfigError(f"Invalid config(s): {key}. The only user config is {QUOTA_KEY}")
        values = {k: validate_rate(entity, v) for k, v in add.items()}
        hkey = self.keys.user_config(entity)
        member = hkey.rsplit(":", 1)[1]

        def change(pipe) -> None:  # runs under WATCH hkey; retried if someone else changes it
            existing = {k.decode() for k in pipe.hkeys(hkey)}
            missing = [k for k in delete if k not in existing]
            if missing:
                raise ConfigError(f"Invalid config(s): {', '.join(missing)} (not set for {entity!r})")
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

        self.client.transaction(change, hkey)

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
                p.hget(f"{self.keys.prefix}:config:users:{n}", QUOTA_KEY)
            values = p.execute()
        out = {}
        for n, v in zip(names, values, strict=True):
            if v is not None:
                out[desanitize(n)] = validate_rate(desanitize(n), v.decode())
        return out

    def version(self) -> int:
        return int(self.client.get(self.keys.config_version) or 0)


class RedisQuotas:
    """The enforcer's :class:`QuotaSource` on Redis, cached per process.

    ``snapshot()`` is called for every principal of every micro-batch; it
    costs one GET of the config version at most every ``refresh_ms``, and a
    reload only when the version moved. If Redis does not answer, the last
    known quotas stay in force (never "everyone unlimited", never "everyone
    throttled"); ``stale`` says so, and the next refresh tries again.
    It is pickled to the executors with the quotas read at start-up.
    """

    def __init__(
        self,
        url: str,
        auth: dict,
        prefix: str,
        initial: Mapping[str, float],
        version: int,
        refresh_ms: int,
    ):
        self.url, self.auth, self.prefix, self.refresh_ms = url, dict(auth), prefix, refresh_ms
        self._quotas, self._version = dict(initial), version
        self._checked = 0.0
        self.stale = False
        self._store = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_store"] = None
        return state

    def _connect(self) -> RedisQuotaStore:
        if self._store is None:
            from store.client import connect

            self._store = RedisQuotaStore(connect(self.url, timeout_s=0.5, **self.auth), self.prefix)
        return self._store

    def snapshot(self) -> Mapping[str, float]:
        now = time.monotonic()
        if (now - self._checked) * 1000 >= self.refresh_ms:
            self._checked = now
            self._refresh()
        return self._quotas

    def _refresh(self) -> None:
        import redis

        try:
            store = self._connect()
            version = store.version()
            if version != self._version:
                self._quotas, self._version = store.snapshot(), version
            if self.stale:
                log.warning("Redis is back; quotas are live again (version %d)", version)
            self.stale = False
        except (redis.RedisError, OSError, ConfigError) as exc:
            self._store = None
            if not self.stale:
                log.warning("Redis unreachable, keeping the last known quotas: %s", type(exc).__name__)
            self.stale = True
