"""Per-user throttle state in Redis, for brokers and proxies to ask, with fenced writes.

Each micro-batch writes, per principal, ``throttled until`` (ms, with a TTL
of the throttle time) for principals throttled in the batch, and the latest
metrics as a hash. The whole batch is one Lua script call that applies only
if the batch id is newer than the last one applied for the query id, then
records it. A batch replayed after a restart, or a zombie second instance of
the same query (same checkpoint, so the same query id), cannot apply stale or
duplicate state: KIP-447's generation fencing, applied to this sink.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from store.keys import Keys

# KEYS[1] = the fence key. ARGV[1] = batch id, ARGV[2] = JSON list of writes:
# ["until", key, until_ms, ttl_ms] | ["hash", key, {field: value}] | ["index", key, member]
_APPLY_LUA = """
local last = tonumber(redis.call('GET', KEYS[1]) or '-1')
local batch = tonumber(ARGV[1])
if batch <= last then return last end
for _, w in ipairs(cjson.decode(ARGV[2])) do
  if w[1] == 'until' then
    local current = tonumber(redis.call('GET', w[2]) or '0')
    if tonumber(w[3]) > current then redis.call('SET', w[2], w[3], 'PX', w[4]) end
  elseif w[1] == 'hash' then
    for field, value in pairs(w[3]) do redis.call('HSET', w[2], field, tostring(value)) end
  elseif w[1] == 'index' then
    redis.call('SADD', w[2], w[3])
  end
end
redis.call('SET', KEYS[1], batch)
return -2
"""

METRIC_FIELDS = (
    "quota",
    "rate",
    "tokens",
    "throttle_time_ms",
    "admitted_total",
    "throttled_total",
    "timestamp",
)


class DecisionStore:
    """The writer side, used by the enforcer's sink."""

    def __init__(self, client, prefix: str = "pidquota") -> None:
        self.client = client
        self.keys = Keys(prefix)
        self._apply = client.register_script(_APPLY_LUA)

    def apply(self, query_id: str, batch_id: int, decisions, metrics, now_ms: int | None = None) -> bool:
        """Write one batch; return False if it was fenced off (not newer than the last applied).

        ``decisions`` and ``metrics`` are iterables of dicts (the batch's rows).
        Throttle state is relative to the decision's event time: a principal
        throttled at ``t`` for ``d`` ms is throttled until ``t + d``; the key
        lives for what is left of that from ``now_ms`` (the wall clock).
        """
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        writes: list = []
        until: dict[str, int] = {}
        for d in decisions:
            if d["verdict"] == "THROTTLE":
                end = int(d["timestamp"]) + int(d["throttle_time_ms"])
                until[d["principal"]] = max(until.get(d["principal"], 0), end)
        for principal, end in until.items():
            ttl = end - now_ms
            if ttl > 0:
                writes.append(["until", self.keys.throttled_until(principal), end, ttl])
        for m in metrics:
            fields = {f: repr(m[f]) for f in METRIC_FIELDS if m.get(f) is not None}
            fields["batch_id"] = str(batch_id)
            writes.append(["hash", self.keys.metrics(m["principal"]), fields])
            writes.append(["index", self.keys.metrics_index, m["principal"]])
        result = self._apply(keys=[self.keys.fence(query_id)], args=[batch_id, json.dumps(writes)])
        return int(result) == -2

    def last_applied(self, query_id: str) -> int | None:
        value = self.client.get(self.keys.fence(query_id))
        return None if value is None else int(value)


@dataclass(frozen=True)
class Status:
    principal: str
    throttled: bool
    throttled_for_ms: int
    throttled_until_ms: int | None
    metrics: dict


class StatusClient:
    """What a broker plug-in or proxy calls: is this user throttled now, and for how long?"""

    def __init__(self, client, prefix: str = "pidquota") -> None:
        self.client = client
        self.keys = Keys(prefix)

    def status(self, principal: str) -> Status:
        with self.client.pipeline(transaction=False) as p:
            p.get(self.keys.throttled_until(principal))
            p.pttl(self.keys.throttled_until(principal))
            p.hgetall(self.keys.metrics(principal))
            until, ttl, raw = p.execute()
        metrics = {k.decode(): _number(v.decode()) for k, v in raw.items()}
        throttled = until is not None and ttl > 0
        return Status(
            principal, throttled, max(0, ttl) if throttled else 0, int(until) if until else None, metrics
        )

    def principals(self) -> list[str]:
        return sorted(m.decode() for m in self.client.smembers(self.keys.metrics_index))


def _number(text: str):
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() else value
