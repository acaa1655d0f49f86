"""Several principals' state in one blob: a state-store row per group of principals.

The stateful operator pays a fixed cost per group and micro-batch (about a
millisecond of pandas work in PySpark's worker, whatever the group holds),
so with one group per principal a batch of 500 active principals costs half
a second before any quota logic runs. Grouping principals into a fixed
number of groups (``pidquota.state.buckets``) bounds that cost, and this
container keeps each principal's own state and timer inside its group's row.

Each principal keeps its :class:`~pidquota.quota.PrincipalQuota` bytes, untouched
until it has events again, and the event time from which it may be evicted
(its *timer*). The group's timer is the earliest of its principals'. Spark
calls the group when it has events, or when its timer has passed the
watermark; then every principal whose own timer passed the watermark and
that had no events in the batch is looked at, exactly as Spark would have
looked at it as a group of its own. So decisions, metrics and evictions are
the same whatever the number of groups.

Worked example: principals a (timer 100) and b (timer 250) share a group,
whose timer is 100. A batch brings events of b only, with the watermark at
120: b is judged and gets timer 400; a's timer passed, so a is looked at
and evicted (or re-armed). The group's timer becomes 400, or a's new one.

Layout (``quota/named.py``): ``b"PQS" + version (1 byte) + count (uint32)``, then per principal
``name length (uint32), name (UTF-8), timer (int64), blob length (uint32),
blob``.
"""

from __future__ import annotations

import struct

from pidquota.quota.named import pack_named, unpack_named

MAGIC, VERSION = b"PQS", 1
_ENTRY = struct.Struct("<qI")


class PrincipalStates:
    """principal -> (timer in event-time ms, PrincipalQuota bytes)."""

    __slots__ = ("entries",)

    def __init__(self, entries: dict[str, tuple[int, bytes]] | None = None) -> None:
        self.entries = entries if entries is not None else {}

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, principal: str) -> bytes | None:
        entry = self.entries.get(principal)
        return None if entry is None else entry[1]

    def put(self, principal: str, blob: bytes, timer_ms: int) -> None:
        self.entries[principal] = (int(timer_ms), blob)

    def set_timer(self, principal: str, timer_ms: int) -> None:
        self.entries[principal] = (int(timer_ms), self.entries[principal][1])

    def remove(self, principal: str) -> None:
        self.entries.pop(principal, None)

    def due(self, watermark_ms: int, skip: set[str]) -> list[str]:
        """Principals whose timer passed the watermark (Spark's rule: timer < watermark)."""
        return [p for p, (t, _) in self.entries.items() if t < watermark_ms and p not in skip]

    def next_timer_ms(self) -> int:
        return min(t for t, _ in self.entries.values())

    def to_bytes(self) -> bytes:
        return pack_named(MAGIC, VERSION, self.entries, lambda e: [_ENTRY.pack(e[0], len(e[1])), e[1]])

    @classmethod
    def from_bytes(cls, buf: bytes) -> PrincipalStates:
        return cls(unpack_named(buf, MAGIC, VERSION, _read_entry, "a group's state"))


def _read_entry(buf: bytes, at: int) -> tuple[tuple[int, bytes], int]:
    timer, size = _ENTRY.unpack_from(buf, at)
    at += _ENTRY.size
    return (timer, bytes(buf[at : at + size])), at + size
