"""When each principal's state may be evicted, kept in slots of event time.

With one state entry per principal (``pidquota.state.layout=principals``,
``streaming/principals.py``) a batch writes only the principals it touched. Their
eviction timers then need an index that a batch can also update in proportion to
what it touched. The wheel is that index: event time is cut into slots of
``SLOT_MS`` (16,384 ms, whatever the window, so a restart with another window finds
its slots), and slot ``s = timer // SLOT_MS`` lists the principals *filed* in it,
as ``name -> filed timer``. Each slot is one state entry, read and written whole.

A principal is filed under a timer no later than its own, and stays there while
its timer moves later, as it does each time the principal sends. So a batch of
known principals writes no slot at all. When a slot's earliest entry passes the
watermark, its due entries are taken: a principal whose own timer passed too is
looked at (evicted, or re-armed), the others are filed again under their own timer.
So a principal sending all the time is filed again about once a window, and each
principal is looked at in the first batch whose watermark is past its own timer
(``timer < watermark``, Spark's rule for a group's timeout), unless that batch
brought it events.

Worked example: a (filed 20,000) and b (filed 30,000) share slot 1, c (filed
40,000) is in slot 2. a sent since, and its own timer is 90,000; b's is 30,000.
A batch with the watermark at 35,000 finds slot 1 due: a is filed again under
90,000 (slot 5), b is looked at and evicted, and slot 1 is dropped, empty.

Layout of a slot (``quota/named.py``): ``b"PQW" + version (1 byte) + count (uint32)``, then per
principal ``name length (uint32), name (UTF-8), timer (int64)``.
"""

from __future__ import annotations

import struct

from pidquota.quota.named import pack_named, unpack_named

MAGIC, VERSION = b"PQW", 1
SLOT_MS = 16_384  # about 220 slots in the default hour; a few for a window of a minute
_TIMER = struct.Struct("<q")


class Slot:
    """The principals filed in one slot: name -> the timer (event-time ms) they were filed under."""

    __slots__ = ("entries",)

    def __init__(self, entries: dict[str, int] | None = None) -> None:
        self.entries = entries if entries is not None else {}

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, principal: str, timer_ms: int) -> None:
        self.entries[principal] = int(timer_ms)

    def take_due(self, watermark_ms: int) -> list[tuple[str, int]]:
        """Remove and return the entries whose timer passed the watermark (``timer < watermark``)."""
        due = [(p, t) for p, t in self.entries.items() if t < watermark_ms]
        for p, _ in due:
            del self.entries[p]
        return due

    def next_timer_ms(self) -> int:
        return min(self.entries.values())

    def to_bytes(self) -> bytes:
        return pack_named(MAGIC, VERSION, self.entries, lambda timer: [_TIMER.pack(timer)])

    @classmethod
    def from_bytes(cls, buf: bytes) -> Slot:
        return cls(unpack_named(buf, MAGIC, VERSION, _read_timer, "an eviction slot"))


def _read_timer(buf: bytes, at: int) -> tuple[int, int]:
    return _TIMER.unpack_from(buf, at)[0], at + _TIMER.size
