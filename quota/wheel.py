"""When each principal's state may be evicted, kept in slots of event time.

With one state entry per principal (``pidquota.state.layout=principals``,
``streaming/principals.py``) a batch writes only the principals it touched. Their
eviction timers then need an index that a batch can also update in proportion to
what it touched. The wheel is that index: event time is cut into slots of
``width`` ms, and slot ``s = timer // width`` lists the principals whose timer fell
in it, as ``name -> timer``. Each slot is one state entry, so a batch rewrites only
the slots its new timers fall in: with a slot of W/256 and a batch covering a few
seconds of event time, one or two slots per group.

Entries are never moved out of a slot. A principal touched again gets a new
entry in its new timer's slot, and its old entry goes *stale*: when the old slot
comes due, the entry's timer no longer matches the principal's own, and the entry
is dropped unread. So touching a principal costs one slot write, not two, and a
slot is read only when its earliest timer passes the watermark.

Exactly Spark's rule for a group's timeout: a principal is looked at in the first
batch whose watermark is past its timer (``timer < watermark``), unless that batch
brought it events.

Worked example, width 100: a (timer 120) and b (timer 180) share slot 1,
c (timer 250) is in slot 2. A batch with the watermark at 150 finds slot 1 due:
a is looked at (evicted, or re-armed into the slot of its new timer), b stays,
and slot 1's next look is at 180. Had a had events in the meantime, its timer
would be, say, 400 (slot 4), and the entry ``a -> 120`` in slot 1 would be stale.

Layout of a slot: ``b"PQW" + version (1 byte) + count (uint32)``, then per
principal ``name length (uint32), name (UTF-8), timer (int64)``.
"""

from __future__ import annotations

import struct

from pidquota.conf.errors import CorruptStateError

MAGIC, VERSION = b"PQW", 1
SLOTS_PER_WINDOW = 256
_HEAD = struct.Struct("<3sBI")
_NAME = struct.Struct("<I")
_TIMER = struct.Struct("<q")


def slot_width(window_ms: int) -> int:
    """The wheel's slot width for the quota window W: W/256 (at least 1 ms)."""
    return max(1, window_ms // SLOTS_PER_WINDOW)


class Slot:
    """The principals whose eviction timer fell in one slot: name -> timer (event-time ms)."""

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
        parts = [_HEAD.pack(MAGIC, VERSION, len(self.entries))]
        for principal, timer in self.entries.items():
            name = principal.encode("utf-8")
            parts += [_NAME.pack(len(name)), name, _TIMER.pack(timer)]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, buf: bytes) -> Slot:
        try:
            magic, version, count = _HEAD.unpack_from(buf, 0)
            if magic != MAGIC or version != VERSION:
                raise ValueError(f"header {bytes(buf[:4])!r}")
            entries, at = {}, _HEAD.size
            for _ in range(count):
                (n,) = _NAME.unpack_from(buf, at)
                name = bytes(buf[at + _NAME.size : at + _NAME.size + n]).decode("utf-8")
                at += _NAME.size + n
                (entries[name],) = _TIMER.unpack_from(buf, at)
                at += _TIMER.size
            if at != len(buf):
                raise ValueError(f"{len(buf) - at} bytes left over")
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            raise CorruptStateError(
                f"an eviction slot in the checkpoint is not pidquota's ({exc}); it was written by another "
                "program or version. Start with a new checkpoint (--fresh)"
            ) from None
        return cls(entries)
