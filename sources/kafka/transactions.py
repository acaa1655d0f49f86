"""``read_committed`` from the log itself: the last stable offset and the aborted transactions
of each partition, found by the driver from record batch headers and control records.

A broker does this for a ``read_committed`` consumer: it serves offsets only below the last
stable offset (LSO), the first offset of the oldest transaction still open, and it lists the
aborted transactions, so that the consumer drops their records. Some brokers do neither (the
Kafka-protocol broker Tansu), so the Kafka source works both out itself, the same way; on
Apache Kafka the tests prove it with real aborted transactions:

- A transactional batch (attribute bit 4) opens, or continues, its producer's transaction.
- A control batch (bit 5) holds one marker record, whose key is (version, type): type 0 is
  ABORT, 1 is COMMIT. It closes its producer's open transaction.
- The LSO is the first offset of the oldest open transaction, or the scanned end if none is
  open. The driver never plans a batch past it, so records of an open transaction wait for
  their marker.
- An aborted transaction is (producer id, first offset, marker offset). A reader drops every
  transactional batch of that producer with first <= offset < marker.

Worked example, one partition, producers 7 and 9 (T: transactional data, C/A: COMMIT/ABORT)::

    offset  0    1    2    3    4    5    6
    batch   7:T  9:T  7:T  7:A  9:T  x    9:C     (x: a plain, non-transactional batch)

Scanned to 3: producers 7 (from 0) and 9 (from 1) are open, so the LSO is 0. Scanned to 4:
7 is aborted, (7, 0, 3); 9 is open from 1, so the LSO is 1: offset 0 may be read (and is
dropped). Scanned to 7: nothing is open, the LSO is 7, and offsets 0..6 read as 1, 4, 5
(and the markers 3 and 6, which are never rows).

A transaction whose marker does not come within ``timeout_s`` (from when the driver first
saw it) is treated as aborted up to where the scan stands, with a warning naming it, as a
broker's coordinator aborts a transaction after ``transaction.timeout.ms``.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pidquota.sources.kafka.records import CONTROL, TRANSACTIONAL, Walk, batch_positions, varint

log = logging.getLogger("pidquota.kafka")
ABORT, COMMIT = 0, 1  # a control record's type
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
Aborted = tuple[int, int, int]  # (producer id, first offset, marker offset)


@dataclass(frozen=True)
class Mark:
    """What one record batch means for transactions: a transactional data batch of producer
    ``producer_id`` at offset ``base`` (``control`` None), or its COMMIT or ABORT marker."""

    base: int
    producer_id: int
    control: int | None  # a control batch's marker type (ABORT, COMMIT), else None


def marks(batches: Walk) -> list[Mark]:
    """The transactional and control batches of a walked Fetch response that hold offsets in
    [start, end): a batch that begins before ``start`` and ends in the range counts (a start
    mid-batch, after a cut by the read limit). Empty batches (compacted away) and legacy
    message sets (magic 0, 1: no transactions) are left out."""
    records, start, end, out = batches.records, batches.start, batches.end, []
    for pos in batch_positions(records, end):
        base, _, _, magic = struct.unpack_from(">qiib", records, pos)
        if magic < 2:
            continue
        attrs, last_delta = struct.unpack_from(">hi", records, pos + 21)
        pid, count = (
            struct.unpack_from(">q", records, pos + 43)[0],
            struct.unpack_from(">i", records, pos + 57)[0],
        )
        if not attrs & (TRANSACTIONAL | CONTROL) or count == 0 or base >= end or base + last_delta < start:
            continue
        out.append(Mark(base, pid, _marker_type(records, pos) if attrs & CONTROL else None))
    return out


def _marker_type(records: bytes, pos: int) -> int:
    """The type in a control batch's one record's key: length, attributes, timestamp delta,
    offset delta, key length (4), then the key, int16 version and int16 type."""
    at = pos + 61
    _, at = varint(records, at)  # the record's length
    at += 1  # attributes
    for _ in range(3):  # timestamp delta, offset delta, key length
        _, at = varint(records, at)
    return struct.unpack_from(">h", records, at + 2)[0]


@dataclass
class PartitionTransactions:
    """One partition's transactions as far as the driver has scanned it (see the module).

    Worked example: begun 0; marks T(0, pid 7), T(1, pid 9), ABORT(3, pid 7) scanned to 4
    leave ``open == {9: (1, seen)}``, ``aborted == [(7, 0, 3)]`` and ``stable == 1``.
    """

    begun: int  # where the scan began
    scanned: int  # every batch from ``begun`` below this offset is accounted for
    open: dict[int, tuple[int, float]] = field(default_factory=dict)  # pid -> (first offset, seen at)
    aborted: list[Aborted] = field(default_factory=list)

    def add(self, found: list[Mark], now: float) -> None:
        for m in found:
            if m.control is None:
                self.open.setdefault(m.producer_id, (m.base, now))
                continue
            begun = self.open.pop(m.producer_id, None)
            if begun is not None and m.control == ABORT:
                self.aborted.append((m.producer_id, begun[0], m.base))

    @property
    def stable(self) -> int:
        """The last stable offset: the oldest open transaction's first offset, or ``scanned``."""
        return min((first for first, _ in self.open.values()), default=self.scanned)

    def expire(self, now: float, timeout_s: float) -> list[tuple[int, int]]:
        """Open transactions first seen more than ``timeout_s`` ago: aborted up to ``scanned``.
        Returns their (producer id, first offset)."""
        gone = [(pid, first) for pid, (first, seen) in self.open.items() if now - seen > timeout_s]
        for pid, first in gone:
            del self.open[pid]
            self.aborted.append((pid, first, self.scanned))
        return gone

    def aborted_in(self, start: int, end: int) -> list[Aborted]:
        """The aborted transactions with records in [start, end)."""
        return [a for a in self.aborted if a[1] < end and a[2] > start]

    def forget_before(self, offset: int) -> None:
        """Drop what no read from ``offset`` on can need."""
        self.aborted = [a for a in self.aborted if a[2] > offset]


Scan = Callable[[str, int, int, int], Iterator[list[Mark]]]  # (topic, partition, start, end) -> marks


class Transactions:
    """The driver's view of the transactions of every partition it reads.

    ``stable_ends(starts, ends, budget)`` scans each partition with ``scan`` from where it
    stands towards ``ends`` (the high watermarks), at most ``budget`` records past its start
    (the read limit; None: to the end), and returns the ends lowered to what is known stable.
    ``aborted(topic, partition, start, end)`` is what a read of that range must drop: every
    transaction with records below ``end`` is closed by then. In the planned flow that holds
    already (``end`` <= the LSO); for a range replayed after a restart, the partition is scanned
    on up to ``high_watermark(topic, partition)`` until it holds.

    Worked example, budget 100: partition ``t-0`` starts at 0 with its high watermark at 10,000
    and a transaction open at 50 whose COMMIT is at 900. The first trigger scans 0..99: the end
    is 50. While the start stays at 50, each trigger scans 100 more, until the COMMIT at 900 is
    found; then the end moves on to the scan's end.
    """

    def __init__(
        self,
        scan: Scan,
        timeout_ms: int,
        clock: Callable[[], float] = time.monotonic,
        high_watermark: Callable[[str, int], int] | None = None,
    ):
        self.scan, self.timeout_s, self.clock = scan, timeout_ms / 1000, clock
        self.high_watermark = high_watermark
        self.parts: dict[tuple[str, int], PartitionTransactions] = {}

    def _followed(self, topic: str, p: int, start: int, high: int | None = None) -> PartitionTransactions:
        """The partition's bookkeeping, followed from ``start`` if it was not yet, or only from
        later on (a batch replayed after a restart: a transaction that began before ``start``
        has its records there already read, or dropped, by committed batches), or if the log
        went back below what was scanned (``high``, the high watermark: truncated, or the topic
        recreated)."""
        part = self.parts.get((topic, p))
        if part is None or start < part.begun or (high is not None and high < part.scanned):
            part = self.parts[(topic, p)] = PartitionTransactions(start, start)
        return part

    def _scan_to(self, part: PartitionTransactions, topic: str, p: int, end: int) -> None:
        if part.scanned < end:
            for found in self.scan(topic, p, part.scanned, end):
                part.add(found, self.clock())
            part.scanned = end

    def _expire(self, part: PartitionTransactions, topic: str, p: int) -> None:
        for pid, first in part.expire(self.clock(), self.timeout_s):
            log.warning(
                "pidquota: producer %d's transaction on %s-%d, open since offset %d, got no COMMIT or "
                "ABORT within %g s (pidquota.kafka.transaction.timeout.ms): its records so far are "
                "treated as aborted",
                pid,
                topic,
                p,
                first,
                self.timeout_s,
            )

    def stable_ends(self, starts: dict, ends: dict, budget: int | None = None) -> dict:
        """``ends`` ({topic: {partition: offset}}) lowered to what is known stable."""
        out: dict[str, dict[str, int]] = {}
        for topic, parts in ends.items():
            for p, end in parts.items():
                start = min(starts.get(topic, {}).get(p, end), end)
                part = self._followed(topic, int(p), start, end)
                target = end if budget is None else min(end, start + budget)
                if part.stable < target and budget is not None:  # an open transaction: look further
                    target = min(end, max(target, part.scanned + budget))
                self._scan_to(part, topic, int(p), target)
                self._expire(part, topic, int(p))
                out.setdefault(topic, {})[p] = max(min(target, part.stable), start)
        followed = {(t, int(p)) for t, parts in ends.items() for p in parts}
        for gone in set(self.parts) - followed:  # partitions no longer read
            del self.parts[gone]
        return out

    def aborted(self, topic: str, p: int, start: int, end: int) -> list[Aborted]:
        part = self._followed(topic, p, start)
        self._scan_to(part, topic, p, end)
        if part.stable < end and self.high_watermark is not None:  # a replayed range: find its markers
            self._scan_to(part, topic, p, self.high_watermark(topic, p))
        if part.stable < end:
            log.warning(
                "pidquota: %s-%d offsets %d..%d hold a transaction whose COMMIT or ABORT is not in the "
                "log yet (a batch planned before a restart, or read_uncommitted): its records are read",
                topic,
                p,
                part.stable,
                end - 1,
            )
        return part.aborted_in(start, end)

    def open_at(self, topic: str, p: int) -> tuple[int, int] | None:
        """The oldest open transaction of a partition: (producer id, first offset), or None."""
        part = self.parts.get((topic, p))
        if part is None or not part.open:
            return None
        pid = min(part.open, key=lambda k: part.open[k][0])
        return pid, part.open[pid][0]

    def forget_before(self, committed: dict) -> None:
        for topic, parts in committed.items():
            for p, offset in parts.items():
                if (topic, int(p)) in self.parts:
                    self.parts[(topic, int(p))].forget_before(int(offset))
