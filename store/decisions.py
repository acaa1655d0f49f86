"""Per-user throttle state in Redis, for brokers and proxies to ask, with fenced writes.

The writer side (:class:`DecisionStore`) replaces each published user's hash
``{P}:users:<name>`` in Lua scripts fenced the way KIP-447 fences
transactional producers; the reader side (:class:`StatusClient`) is what a
broker plug-in or proxy needs. Both answer in the user's event time; only the
expiry is in wall-clock time: each hash written carries ``published_ms`` and
expires ``pidquota.redis.state.ttl.ms`` after it (as does the index of users),
so a stopped run's throttles lift by themselves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from pidquota.quota.client import COLUMNS as CLIENT_COLUMNS
from pidquota.quota.client import Client
from pidquota.quota.user_state import UserState
from pidquota.store.keys import Keys

# At most this many users per script call. A Lua script runs atomically:
# while it runs, Redis answers nobody else (brokers asking for a user's
# status wait). 200 users are ~600 commands (DEL, HSET, SADD) and a ~50 KB
# request: well under a millisecond of blocking, and far below Lua's
# unpack() and Redis's argument limits. Larger batches become several calls
# sent in one pipeline.
MAX_USERS_PER_CALL = 200

# KEYS[1] = the fence hash, KEYS[2 .. #KEYS-1] = the users' state hashes,
# KEYS[#KEYS] = the state index. ARGV[1] = writer generation, ARGV[2] = batch
# id, ARGV[3] = the state's time to live in ms (0: none); for the i-th user
# (KEYS[1 + i]): ARGV[2 + 2i] = its principal (the index member), ARGV[3 + 2i]
# = a JSON list [field, value, field, value, ...]. Every key the script
# touches is declared in KEYS, all in the {PREFIX} slot.
_WRITE_LUA = """
local gen, batch, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local fence = redis.call('HMGET', KEYS[1], 'generation', 'batch')
local g, b = tonumber(fence[1]) or 0, tonumber(fence[2]) or -1
if gen < g then return {'FENCED', g, b} end
if gen == g and batch < b then return {'STALE', g, b} end
redis.call('HSET', KEYS[1], 'generation', gen, 'batch', batch)
local index = KEYS[#KEYS]
for i = 1, #KEYS - 2 do
  local key = KEYS[1 + i]
  redis.call('DEL', key)
  local fields = cjson.decode(ARGV[3 + 2 * i])
  if #fields > 0 then redis.call('HSET', key, unpack(fields)) end
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  redis.call('SADD', index, ARGV[2 + 2 * i])
end
if ttl > 0 and #KEYS > 2 then redis.call('PEXPIRE', index, ttl) end
return {'OK', gen, batch}
"""

OK, FENCED, STALE = "OK", "FENCED", "STALE"


@dataclass(frozen=True)
class WriteResult:
    """``status`` OK, FENCED or STALE, and the fence's generation and batch after the call."""

    status: str
    generation: int
    batch: int

    @property
    def applied(self) -> bool:
        return self.status == OK


class DecisionStore:
    """The writer side, used by :class:`pidquota.store.sink.RedisPublisher`; KIP-447 fencing per query.

    Each run of a query calls :meth:`begin` once and gets a new generation
    (the fence's ``generation`` + 1, like a producer epoch bumped by
    ``InitProducerId``). A write carries (generation, batch id) and applies
    only if ``generation >= fence.generation`` (else FENCED: a zombie from
    an older run). Within one generation batch ids only go forward
    (``batch >= fence.batch``, else STALE; equal is allowed, so a batch split
    over several calls is applied in full). A newer generation starts the
    order afresh, as a bumped producer epoch resets sequence numbers: a run
    restarted from a restored or trimmed checkpoint publishes its batches
    even though an older run got further. Example: run A begins (generation
    1), run B begins (generation 2); A's batch 100 is FENCED although 100 is
    higher, B's batch 5 is applied (fence: 2, 5).
    """

    def __init__(
        self,
        client,
        prefix: str = "pidquota",
        shadow: bool = False,
        ttl_ms: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.keys = Keys(prefix, shadow)
        self.ttl_ms = int(ttl_ms)  # each written hash expires this long after its write; 0: never
        self.clock = clock  # wall-clock seconds: each hash's published_ms
        self._write = client.register_script(_WRITE_LUA)

    def begin(self, query_id: str) -> int:
        """Take the next writer generation of ``query_id``, fencing off every earlier one; its
        batch order starts afresh (a MULTI on one key, so no writer sees half of it)."""
        key = self.keys.fence(query_id)
        with self.client.pipeline(transaction=True) as p:
            p.hincrby(key, "generation", 1)
            p.hdel(key, "batch")
            generation, _ = p.execute()
        return int(generation)

    def call_keys(self, query_id: str, states: Sequence[UserState]) -> list[str]:
        """KEYS of one script call: the fence, each user's hash, the index."""
        users = [self.keys.user_state(s.principal) for s in states]
        return [self.keys.fence(query_id), *users, self.keys.state_index]

    def write(
        self, query_id: str, generation: int, batch_id: int, states: Sequence[UserState]
    ) -> WriteResult:
        """Replace each user's hash with ``states``, fenced; at most
        :data:`MAX_USERS_PER_CALL` users per script call, the calls pipelined.
        Returns the first refusal, or the last call's OK."""
        chunks = [states[i : i + MAX_USERS_PER_CALL] for i in range(0, len(states), MAX_USERS_PER_CALL)]
        published = {"published_ms": str(int(self.clock() * 1000))}
        with self.client.pipeline(transaction=False) as pipe:
            for chunk in chunks or [[]]:
                args = [generation, batch_id, self.ttl_ms]
                for s in chunk:
                    fields = {**s.fields(), **published}
                    args += [s.principal, json.dumps([x for kv in fields.items() for x in kv])]
                self._write(keys=self.call_keys(query_id, chunk), args=args, client=pipe)
            results = [WriteResult(r[0].decode(), int(r[1]), int(r[2])) for r in pipe.execute()]
        return next((r for r in results if not r.applied), results[-1])

    def fence_state(self, query_id: str) -> tuple[int, int | None]:
        """``(generation, last batch applied)`` of ``query_id``: ``(0, None)`` if never written."""
        generation, batch = self.client.hmget(self.keys.fence(query_id), "generation", "batch")
        return int(generation or 0), None if batch is None else int(batch)


def event_time(ms: int) -> str:
    """``2026-01-02T03:04:05.678Z``."""
    text = datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


@dataclass(frozen=True)
class Status:
    """A user's published state. Times are the user's event time (ms since the epoch):
    ``now_ms`` is the newest event time the enforcer has seen from that user, and
    ``throttled_for_ms = throttled_until_ms - now_ms`` when throttled."""

    principal: str
    throttled: bool
    throttled_for_ms: int
    throttled_until_ms: int | None
    now_ms: int | None
    metrics: dict
    published_ms: int | None = None  # wall clock: when the enforcer wrote this state
    expires_in_ms: int | None = None  # wall clock: when Redis drops it; None: never
    client: Client | None = None  # its main client, where the input names one

    def published(self, wall_ms: int) -> str | None:
        """When the state was published and when it expires, in wall-clock time (None for a
        state written without ``published_ms``). ``wall_ms`` is now."""
        if self.published_ms is None:
            return None
        age = f"{shown_ms(wall_ms - self.published_ms)} ago"
        if self.expires_in_ms is None:
            gone = "it never expires (pidquota.redis.state.ttl.ms=0)"
        else:
            gone = f"gone in {shown_ms(self.expires_in_ms)} unless the enforcer publishes it again"
        return f"published {event_time(self.published_ms)} ({age}, wall clock); {gone}"

    def line(self) -> str:
        """One line for ``pidquota status``."""
        if self.now_ms is None:
            return f"{self.principal}: no state published"
        latest = f"its latest event {event_time(self.now_ms)}"
        who = f"; {self.client.text()}" if self.client is not None else ""
        if not self.throttled:
            return f"{self.principal}: not throttled ({latest}){who}"
        return (
            f"{self.principal}: THROTTLED for {self.throttled_for_ms} ms of event time "
            f"(until {event_time(self.throttled_until_ms)}; {latest}){who}"
        )


class StatusClient:
    """What a broker plug-in or proxy calls: is this user throttled, and for how long?

    One HGETALL of ``{P}:users:<name>``. The answer is in the user's event
    time, exactly what the enforcer's latest metrics row for that user says.
    Example: hash ``now_ms=T, throttled_until_ms=T+36000, quota=100,
    tokens=0`` -> THROTTLED for 36000 ms; a hash without
    ``throttled_until_ms`` -> not throttled.
    """

    def __init__(self, client, prefix: str = "pidquota", shadow: bool = False) -> None:
        self.client = client
        self.keys = Keys(prefix, shadow)

    def status(self, principal: str) -> Status:
        key = self.keys.user_state(principal)
        with self.client.pipeline(transaction=True) as p:
            raw, ttl = p.hgetall(key).pttl(key).execute()
        text = {k.decode(): v.decode() for k, v in raw.items()}
        client = Client.from_row({k: text.pop(k, None) for k in CLIENT_COLUMNS})
        metrics = {k: _number(v) for k, v in text.items()}
        now, until = metrics.pop("now_ms", None), metrics.pop("throttled_until_ms", None)
        published = metrics.pop("published_ms", None)
        throttled = now is not None and until is not None and until > now
        return Status(
            principal,
            throttled,
            until - now if throttled else 0,
            until if throttled else None,
            now,
            metrics,
            published,
            ttl if ttl >= 0 else None,
            client,
        )

    def principals(self) -> list[str]:
        return sorted(m.decode() for m in self.client.smembers(self.keys.state_index))


def shown_ms(ms: int) -> str:
    """A wall-clock span for people: ``850 ms``, ``12 s``, ``4 min 10 s``, ``2 h 5 min``."""
    if ms < 1000:
        return f"{max(ms, 0)} ms"
    s = ms // 1000
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min" if s % 3600 // 60 else f"{s // 3600} h"


def _number(text: str):
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() else value
