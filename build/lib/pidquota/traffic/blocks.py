"""KIP-730 producer-ID blocks: a controller hands out blocks of PIDs, never twice.

``AllocateProducerIds(broker_id, broker_epoch)`` returns a block
``[start, start + length)``. The block is persisted (with its audit entry)
before it is returned, so no block is handed out twice, even across restarts
or by concurrent allocators. A request carrying a broker epoch other than the
broker's registered one is refused (``STALE_BROKER_EPOCH``). Stores: a local
JSON file (atomic rename under an exclusive lock) or Redis (one Lua script).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from pidquota.conf.errors import PidquotaError

BLOCK_SIZE = 1000  # KIP-730: "blocks of 1000"


class StaleBrokerEpochError(PidquotaError):
    """``STALE_BROKER_EPOCH``: the broker restarted since it registered this epoch."""

    code = "STALE_BROKER_EPOCH"


class UnknownBrokerError(PidquotaError):
    """A broker asked for a block without registering first."""


@dataclass(frozen=True)
class ProducerIdBlock:
    """One allocation; ``block_end`` is inclusive, as in KIP-730's audit log."""

    broker_id: int
    broker_epoch: int
    start: int
    length: int

    @property
    def block_end(self) -> int:
        return self.start + self.length - 1

    def audit_record(self) -> dict:
        return {**asdict(self), "block_end": self.block_end}


class BlockStore(Protocol):
    def register_broker(self, broker_id: int) -> int:
        """A broker (re)starts: bump and return its epoch."""

    def allocate(self, broker_id: int, broker_epoch: int, length: int = BLOCK_SIZE) -> ProducerIdBlock:
        """Atomically check the epoch, take the next block, persist it, audit it."""

    def history(self) -> list[ProducerIdBlock]:
        """Every block handed out, in order."""


class MemoryBlockStore:
    """For tests and the demo: the same rules, nothing persisted."""

    def __init__(self) -> None:
        self.next_start = 0
        self.brokers: dict[int, int] = {}
        self.blocks: list[ProducerIdBlock] = []

    def register_broker(self, broker_id: int) -> int:
        self.brokers[broker_id] = self.brokers.get(broker_id, -1) + 1
        return self.brokers[broker_id]

    def allocate(self, broker_id: int, broker_epoch: int, length: int = BLOCK_SIZE) -> ProducerIdBlock:
        _check_epoch(self.brokers, broker_id, broker_epoch)
        block = ProducerIdBlock(broker_id, broker_epoch, self.next_start, length)
        self.next_start += length
        self.blocks.append(block)
        return block

    def history(self) -> list[ProducerIdBlock]:
        return list(self.blocks)


def _check_epoch(brokers: dict, broker_id: int, broker_epoch: int) -> None:
    current = brokers.get(broker_id)
    if current is None:
        raise UnknownBrokerError(f"broker {broker_id} has not registered with the controller")
    if broker_epoch != current:
        raise StaleBrokerEpochError(
            f"STALE_BROKER_EPOCH: broker {broker_id} sent epoch {broker_epoch}, registered epoch is {current}"
        )


class FileBlockStore:
    """One JSON file holds the next start, the broker epochs and the audit log.

    Every change is made under ``flock`` on ``PATH.lock`` and written as a new
    file that replaces the old one (fsync, then rename), so a crash leaves the
    old or the new state, never a block handed out but not recorded.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_path = self.path.with_name(self.path.name + ".lock")

    @contextlib.contextmanager
    def _locked(self):
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield self._read()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict:
        if not self.path.exists():
            return {"version": 1, "next_start": 0, "brokers": {}, "blocks": []}
        try:
            state = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise PidquotaError(f"block store {str(self.path)!r} is unreadable: {exc}") from None
        if state.get("version") != 1:
            raise PidquotaError(
                f"block store {str(self.path)!r} has version {state.get('version')!r}, expected 1"
            )
        return state

    def _write(self, state: dict) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def register_broker(self, broker_id: int) -> int:
        with self._locked() as state:
            epoch = state["brokers"].get(str(broker_id), -1) + 1
            state["brokers"][str(broker_id)] = epoch
            self._write(state)
            return epoch

    def allocate(self, broker_id: int, broker_epoch: int, length: int = BLOCK_SIZE) -> ProducerIdBlock:
        with self._locked() as state:
            _check_epoch({int(k): v for k, v in state["brokers"].items()}, broker_id, broker_epoch)
            block = ProducerIdBlock(broker_id, broker_epoch, state["next_start"], length)
            state["next_start"] += length
            state["blocks"].append(block.audit_record())
            self._write(state)
            return block

    def history(self) -> list[ProducerIdBlock]:
        return [
            ProducerIdBlock(b["broker_id"], b["broker_epoch"], b["start"], b["length"])
            for b in self._read()["blocks"]
        ]


# KEYS: next, broker epoch, audit. ARGV: broker id, broker epoch, length.
_ALLOCATE_LUA = """
local registrations = redis.call('GET', KEYS[2])
if not registrations then return redis.error_reply('UNKNOWN_BROKER') end
local epoch = tonumber(registrations) - 1  -- the key counts registrations; epochs start at 0
if epoch ~= tonumber(ARGV[2]) then return redis.error_reply('STALE_BROKER_EPOCH ' .. epoch) end
local length = tonumber(ARGV[3])
local start = redis.call('INCRBY', KEYS[1], length) - length
redis.call('RPUSH', KEYS[3], cjson.encode({broker_id=tonumber(ARGV[1]), broker_epoch=tonumber(ARGV[2]),
  start=start, length=length}))
return start
"""


class RedisBlockStore:
    """Blocks in Redis under ``PREFIX:``: the next start (INCRBY), each broker's
    registration count (its epoch + 1), and the audit list, changed together
    by one Lua script."""

    def __init__(self, client, prefix: str = "{pidquota}:pid-blocks") -> None:
        self.client = client
        self.prefix = prefix
        self._allocate = client.register_script(_ALLOCATE_LUA)

    def _key(self, *parts) -> str:
        return ":".join([self.prefix, *map(str, parts)])

    def register_broker(self, broker_id: int) -> int:
        return int(self.client.incr(self._key("broker", broker_id))) - 1

    def allocate(self, broker_id: int, broker_epoch: int, length: int = BLOCK_SIZE) -> ProducerIdBlock:
        import redis

        keys = [self._key("next"), self._key("broker", broker_id), self._key("audit")]
        try:
            start = self._allocate(keys=keys, args=[broker_id, broker_epoch, length])
        except redis.ResponseError as exc:
            text = str(exc)
            if text.startswith("STALE_BROKER_EPOCH"):
                current = text.split()[-1]
                raise StaleBrokerEpochError(
                    f"STALE_BROKER_EPOCH: broker {broker_id} sent epoch {broker_epoch}, registered epoch is {current}"
                ) from None
            if text.startswith("UNKNOWN_BROKER"):
                raise UnknownBrokerError(
                    f"broker {broker_id} has not registered with the controller"
                ) from None
            raise
        return ProducerIdBlock(broker_id, broker_epoch, int(start), length)

    def history(self) -> list[ProducerIdBlock]:
        out = []
        for raw in self.client.lrange(self._key("audit"), 0, -1):
            b = json.loads(raw)
            out.append(ProducerIdBlock(b["broker_id"], b["broker_epoch"], b["start"], b["length"]))
        return out
