"""One principal's batch of sightings judged at once in numpy, exactly as one at a time."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pidquota.bloom.layer import TimestampedBloomFilter
from pidquota.bloom.layered import PidHashes
from pidquota.quota.bucket_run import BucketRun
from pidquota.quota.decision import Decisions

# Rounds of the fixpoint in a writable segment before it is cut at its first unsettled sighting
_ROUNDS = 4
# A writable segment looks this far ahead at first; x4 after a segment that settles in
# time, /4 (down to _FIRST_CHUNK) after one that is cut, so a run of cut segments (a
# bucket that settles a few sightings a round) costs in proportion to what it settles
_FIRST_SPAN = 4096
# A frozen segment is read in chunks that grow by 4x from this size
_FIRST_CHUNK = 64
_NEVER = np.iinfo(np.int64).max
# Layers up to this many bits keep a bit -> first write table as an array (8 B a bit)
_DENSE_BITS = 1 << 20


class _Trial(NamedTuple):
    """A writable segment judged under a guess of which sightings the newest layer holds."""

    known: np.ndarray  # per sighting: known (no verdict)
    unknown: np.ndarray  # indexes of the unknown sightings, in order
    run: BucketRun  # the bucket's answers to them
    inserts: np.ndarray  # per sighting: written to the newest layer
    written: np.ndarray  # indexes of those
    cut: int  # the segment ends after the write that fills the newest layer


class BatchJudge:
    """``PrincipalQuota.observe`` over sorted, deduplicated sightings, in segments.

    A sighting at ``now`` is *known* if its PID is in a layer alive at
    ``now``; known PIDs are refreshed into the newest layer, unknown ones ask
    the bucket, and what is admitted (or replayed) is written there too. The
    layers change only at a *roll* (a new newest layer). So the batch splits
    into segments, and each is judged in numpy:

    * **frozen** (no writable newest layer: none, full, older than the span,
      or written with the legacy hash): every layer is fixed, so ``known`` is
      one bit test per layer for all sightings at once. The first sighting
      that writes (known, admitted or replayed) rolls a new layer, scalar,
      and a writable segment starts after it.
    * **writable** (until ``created + span``): the older layers are fixed;
      the newest holds its bits at the start *or* bits that earlier sightings
      of the segment wrote. That is a fixpoint: guess which sightings it
      holds, judge every sighting under the guess (the bucket in one
      :class:`BucketRun`), compute which bits the resulting writes set and
      which sightings they cover (a sighting is held once all of its bits
      are set, by the start or by a write *before* it), and repeat with that
      as the guess. A sighting's answer depends only on those before it, so
      each round settles at least the first sighting where the guess was
      wrong; it usually settles all in two. After ``_ROUNDS`` rounds the
      segment is cut at its first unsettled sighting, and a new one starts
      there. A segment also ends at the write that fills the newest layer
      (every write adds a PID that was not in it, so the count is exact).

    Worked example, R = 2 with a full bucket, a newest layer holding PID 1,
    and sightings of PIDs 7, 7, 1, 8, 9 at t = 0..4. Round one guesses the
    layer holds [no, no, yes, no, no] (its bits at the start): the bucket
    admits 7 twice and refuses 8 and 9, and the writes (7 at t=0 and t=1)
    set 7's bits before the second sighting. Round two guesses [no, yes,
    yes, no, no]: 7 admitted once, 8 admitted, 9 refused; the writes (7, 8)
    cover nothing new, so round three would guess the same: settled.

    Time is the caller's: ``now = max(quota.now_ms, timestamp)``.
    """

    __slots__ = ("q", "ts", "pids", "epochs", "now", "hashes", "replayed", "_parts", "_span")

    def __init__(self, quota, ts: np.ndarray, pids: np.ndarray, epochs: np.ndarray, replayed: int) -> None:
        self.q = quota
        self.ts, self.pids, self.epochs = ts, pids, epochs
        self.now = np.maximum(ts, quota.now_ms)
        self.hashes = PidHashes(pids)
        self.replayed = replayed  # sightings before this index are replayed
        self._parts: list[tuple] = []
        self._span = _FIRST_SPAN

    def run(self) -> Decisions:
        n, a = len(self.ts), 0
        f = self.q.filter
        while a < n:
            self.q.cleanup_due(int(self.now[a]))
            if f.writable(int(self.now[a])) is not None:
                a = self._writable_segment(a)
            else:
                a = self._frozen_segment(a)
        if n:
            self.q.now_ms = max(self.q.now_ms, int(self.now[-1]))
            self.q.cleanup_due(self.q.now_ms)
        return self._decisions()

    # -- a writable segment ----------------------------------------------------
    def _writable_segment(self, a: int) -> int:
        f = self.q.filter
        newest = f.layers[-1]
        b = int(np.searchsorted(self.now, newest.created_ms + f.span_ms, side="left"))
        b = min(b, a + self._span)
        now = self.now[a:b]
        older = f.known_many(self.hashes, a, b, now, skip_newest=True)
        held0 = self.hashes.has(newest, slice(a, b))
        room = newest.capacity - newest.count
        guess = held0
        for rnd in range(_ROUNDS):
            trial = self._trial(a, now, older, guess, room)
            held = held0 | self._covered(newest, a, trial.written, held0)
            diff = np.flatnonzero(held[: trial.cut] != guess[: trial.cut])
            if not len(diff) or rnd == _ROUNDS - 1:
                settled = not len(diff)
                self._span = self._span * 4 if settled else max(_FIRST_CHUNK, self._span // 4)
                return self._commit_writable(a, trial, trial.cut if settled else int(diff[0]), now)
            guess = held
        raise AssertionError("unreachable")

    def _trial(self, a: int, now: np.ndarray, older: np.ndarray, held: np.ndarray, room: int) -> _Trial:
        known = held | older
        unknown = np.flatnonzero(~known)
        run = BucketRun(self.q.bucket, now[unknown])
        takes = run.admitted | (a + unknown < self.replayed)
        inserts = older & ~held
        inserts[unknown[takes]] = True
        written = np.flatnonzero(inserts)
        cut = int(written[room - 1]) + 1 if len(written) >= room else len(now)
        return _Trial(known, unknown, run, inserts, written, cut)

    def _covered(self, newest, a: int, written: np.ndarray, held0: np.ndarray) -> np.ndarray:
        """Per sighting of ``a:``: are all its bits set at the start or by a write before it?

        A bit's first write is the smallest index among the writes that set
        it; a sighting is covered once the latest of its bits' first writes
        is before it. Only the sightings whose bits are all set once every
        write is done (one membership test) are looked at closely.
        """
        out = np.zeros(len(held0), dtype=bool)
        if not len(written):
            return out
        ask = np.flatnonzero(~held0)
        ask = ask[ask > written[0]]
        if not len(ask):
            return out
        wrote = self.hashes.positions(newest, a + written)
        after = newest.buffer().copy()
        TimestampedBloomFilter.set_bits(after, wrote)
        ask = ask[self.hashes.has(newest, a + ask, after)]
        if len(ask):
            out[ask] = _first_set(newest, self.hashes.positions(newest, a + ask), wrote, written) < ask
        return out

    def _commit_writable(self, a: int, trial: _Trial, end: int, now: np.ndarray) -> int:
        newest = self.q.filter.layers[-1]
        decided = int(np.searchsorted(trial.unknown, end))
        trial.run.commit(decided)
        self._record(a + trial.unknown[:decided], trial.run, decided)
        written = trial.written[: int(np.searchsorted(trial.written, end))]
        touched = np.flatnonzero(trial.known[:end] | trial.inserts[:end])
        if len(written):
            wrote = self.hashes.positions(newest, a + written)
            newest.set_positions(wrote, len(written), int(now[written[-1]]))
        if len(touched):
            newest.touch(int(now[touched[-1]]))
        return a + end

    # -- a frozen segment ------------------------------------------------------
    def _frozen_segment(self, a: int) -> int:
        n, size = len(self.ts), _FIRST_CHUNK
        while a < n:
            b = min(n, a + size)
            known = self.q.filter.known_many(self.hashes, a, b, self.now[a:b])
            unknown = np.flatnonzero(~known)
            run = BucketRun(self.q.bucket, self.now[a:b][unknown])
            takes = run.admitted | (a + unknown < self.replayed)
            first = min(
                int(np.argmax(known)) if known.any() else b - a,
                int(unknown[np.argmax(takes)]) if takes.any() else b - a,
            )
            refused = int(np.searchsorted(unknown, first))
            if first == b - a:  # nothing written: all refused
                run.commit(refused)
                self._record(a + unknown, run, refused)
                a, size = b, size * 4
                continue
            decided = refused + (0 if known[first] else 1)
            run.commit(decided)
            self._record(a + unknown[:decided], run, decided)
            i = a + first
            self.q.filter.add(int(self.pids[i]), int(self.now[i]), self.q._capacity)
            return i + 1
        return a

    # -- verdicts ----------------------------------------------------------------
    def _record(self, idx: np.ndarray, run: BucketRun, m: int) -> None:
        """The verdicts of the first ``m`` requests of ``run`` (sightings ``idx``)."""
        if not m:
            return
        admitted, wait = run.admitted[:m], run.wait[:m]
        self._parts.append((idx, admitted, wait, run.tokens[:m]))
        q = self.q
        q.stats.record_many(self.now[idx], admitted, wait)
        took = int(admitted.sum())
        q.admitted_total += took
        q.throttled_total += m - took

    def _decisions(self) -> Decisions:
        if not self._parts:
            return Decisions.empty()
        idx, admitted, wait, tokens = (np.concatenate(c) for c in zip(*self._parts, strict=True))
        return Decisions(self.pids[idx], self.epochs[idx], self.ts[idx], admitted, wait, tokens)


def _first_set(newest, want: np.ndarray, wrote: np.ndarray, written: np.ndarray) -> np.ndarray:
    """For each row of bit positions ``want``: the index of the write after which all of
    them are set (-1: set at the start), given the writes ``written`` and their bits."""
    by = np.repeat(written, wrote.shape[1])
    wrote = wrote.ravel()
    bits = newest.num_bits
    if bits <= _DENSE_BITS:
        table = np.full(bits, _NEVER, dtype=np.int64)
        np.minimum.at(table, wrote, by)
        set_by = table[want]
    else:
        by_bit, first = np.unique(wrote, return_index=True)  # the first of a bit is its earliest write
        by = by[first]
        at = np.minimum(np.searchsorted(by_bit, want), len(by_bit) - 1)
        set_by = np.where(by_bit[at] == want, by[at], _NEVER)
    set_by = np.where(newest.bits_of(want), -1, set_by)
    return set_by.max(axis=1)
