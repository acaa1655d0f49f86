"""The stateful operator with one state entry per principal (``pidquota.state.layout=principals``).

``streaming/operator.py`` keeps a group of principals in one state row, so a batch
that touches one principal of a group rewrites the whole group: at a million
principals, a batch touching 1% of them rewrites all of the state. Here the same
groups are Spark's grouping keys for ``transformWithStateInPandas``, but each
principal is its own entry of a MapState (``quota``: principal -> timer, filed
timer, quota bytes), so a batch writes the principals it touched and nothing else.
Eviction timers live in the wheel (``quota/wheel.py``), a second MapState of slots,
with a Spark timer at the earliest entry of each slot.

The judging is ``streaming/operator.py``'s, call for call, so decisions, metrics
and evictions are those of the group layout (``tests/streaming/test_state_groups.py``).
A touched principal costs one state read and one write (a round trip to the JVM
each); the wheel costs a read and a write of a slot per slot that comes due, and one
more read and write per principal about once a window (its re-filing). Measured in
``benchmarks/state_scale.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from pidquota.quota import QuotaSettings, QuotaSource, resolve
from pidquota.quota.wheel import SLOT_MS, Slot
from pidquota.streaming.columns import DEAD_PRINCIPAL
from pidquota.streaming.operator import dead_letters, frame, judge_principal, on_timeout, unfold

QUOTA_KEY = StructType([StructField("principal", StringType())])
QUOTA_VALUE = StructType(
    [StructField("timer", LongType()), StructField("filed", LongType()), StructField("blob", BinaryType())]
)
SLOT_KEY = StructType([StructField("slot", LongType())])
SLOT_VALUE = StructType([StructField("entries", BinaryType())])


class Entry(NamedTuple):
    """A principal's state entry: its eviction timer, the timer its wheel entry was filed
    under (``filed <= timer``; None: its entry was just taken from the wheel), its bytes."""

    timer: int
    filed: int | None
    blob: bytes


class MapStates:
    """:class:`pidquota.quota.states.PrincipalStates`'s interface (what ``judge_principal`` and
    ``on_timeout`` call) over the ``quota`` MapState, one read per principal at most.

    A principal keeps one entry in the wheel, filed under a timer no later than its own:
    a new timer that is later (the usual case, as a principal sends on) files nothing;
    one that is earlier (a raised quota refills its bucket sooner), or a principal with
    no entry, is filed again (``moved``, for the processor to add to the wheel)."""

    def __init__(self, quota) -> None:
        self.quota = quota
        self.seen: dict[str, Entry | None] = {}
        self.moved: dict[str, int] = {}

    def entry(self, principal: str) -> Entry | None:
        if principal not in self.seen:
            value = self.quota.getValue((principal,))
            self.seen[principal] = (
                None if value is None else Entry(int(value[0]), int(value[1]), bytes(value[2]))
            )
        return self.seen[principal]

    def get(self, principal: str) -> bytes | None:
        entry = self.entry(principal)
        return None if entry is None else entry.blob

    def put(self, principal: str, blob: bytes, timer_ms: int) -> None:
        timer, old = int(timer_ms), self.entry(principal)
        filed = old.filed if old is not None and old.filed is not None and old.filed <= timer else None
        if filed is None:
            filed = self.moved[principal] = timer
        self._write(principal, Entry(timer, filed, blob))

    def set_timer(self, principal: str, timer_ms: int) -> None:
        self.put(principal, self.entry(principal).blob, timer_ms)

    def remove(self, principal: str) -> None:
        if self.entry(principal) is not None:  # (no write for a principal that has no state)
            self.quota.removeKey((principal,))
        self.seen[principal] = None
        self.moved.pop(principal, None)

    def unfile(self, principal: str) -> None:
        """Its wheel entry was taken: the next :meth:`put` files it again."""
        self.seen[principal] = self.entry(principal)._replace(filed=None)

    def refile(self, principal: str) -> None:
        """File it again under its own timer, which has not passed."""
        entry = self.entry(principal)
        self.moved[principal] = entry.timer
        self._write(principal, entry._replace(filed=entry.timer))

    def _write(self, principal: str, entry: Entry) -> None:
        self.quota.updateValue((principal,), tuple(entry))
        self.seen[principal] = entry


class PrincipalProcessor(StatefulProcessor):
    """One group of principals per grouping key; one MapState entry per principal.

    Timers, in event-time ms, follow Spark's rule (a timer fires in the first batch
    whose watermark is past it). A principal's wheel entry is filed under a timer no
    later than its own, so it comes due no later than the principal: then the
    principal is looked at (evicted, or re-armed) if its own timer passed too, and
    filed again under its own timer if not. Worked example, slots of 16,384 ms: a
    principal first judged with its timer at 70,500 is filed in slot 4; it sends
    again and its timer moves to 95,000, which files nothing. The first batch with
    the watermark past 70,500 fires slot 4's timer; the principal's timer has not
    passed, so it is filed under 95,000 (slot 5), whose timer fires in the first
    batch with the watermark past 95,000, exactly when the group layout looks at it."""

    def __init__(
        self,
        quotas: QuotaSource,
        settings: QuotaSettings,
        replay_until: int | None = None,
        addresses: bool = False,
        compiled_after: int | None = None,
    ):
        self.quotas, self.settings, self.replay_until = quotas, settings, replay_until
        self.addresses = addresses  # untracked principals' addresses (operator.judge_principal)
        self.compiled_after = compiled_after  # pidquota.compiled.after (operator.make_state_function)

    def init(self, handle) -> None:
        if self.compiled_after is not None:  # in the worker: the run's setting
            from pidquota.quota import kernel

            kernel.LOAD_AFTER = self.compiled_after
        self.handle = handle
        self.quota = handle.getMapState("quota", QUOTA_KEY, QUOTA_VALUE)
        self.wheel = handle.getMapState("wheel", SLOT_KEY, SLOT_VALUE)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        (group,) = key
        if group == DEAD_PRINCIPAL:
            yield from dead_letters(rows)
            return
        watermark = timerValues.getCurrentWatermarkInMs()
        frames = list(rows)
        pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        snapshot, stale = self.quotas.snapshot(), bool(self.quotas.stale)
        states, settings, until = MapStates(self.quota), self.settings, self.replay_until
        judged = [
            judge_principal(
                p, s, states, watermark, resolve(snapshot, p), stale, settings, until, self.addresses
            )
            for p, s in unfold(pdf).items()
        ]
        self._file(states.moved)
        if judged:
            yield frame(judged)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        """A slot's earliest timer passed: look at its principals that are due."""
        watermark = timerValues.getCurrentWatermarkInMs()
        sid = expiredTimerInfo.getExpiryTimeInMs() // SLOT_MS
        value = self.wheel.getValue((sid,))
        if value is not None:
            slot = Slot.from_bytes(bytes(value[0]))
            states = MapStates(self.quota)
            for principal, filed in slot.take_due(watermark):
                entry = states.entry(principal)
                if entry is None or entry.filed != filed:  # stale: evicted, or filed again earlier
                    continue
                states.unfile(principal)
                if entry.timer < watermark:
                    on_timeout(states, principal, watermark, self.settings)
                else:
                    states.refile(principal)
            self._save(sid, slot, None)
            self._file(states.moved)
        return iter(())

    def _file(self, moved: dict[str, int]) -> None:
        """Add the principals' wheel entries to their slots."""
        by_slot: dict[int, dict[str, int]] = {}
        for principal, timer in moved.items():
            by_slot.setdefault(timer // SLOT_MS, {})[principal] = timer
        for sid, entries in by_slot.items():
            value = self.wheel.getValue((sid,))
            slot = Slot.from_bytes(bytes(value[0])) if value is not None else Slot()
            earliest = slot.next_timer_ms() if len(slot) else None
            for principal, timer in entries.items():
                slot.add(principal, timer)
            self._save(sid, slot, earliest)

    def _save(self, sid: int, slot: Slot, armed_at: int | None) -> None:
        """Write a slot back (or drop it, empty), with a Spark timer at its earliest entry
        unless one at ``armed_at`` already comes no later."""
        if not len(slot):
            self.wheel.removeKey((sid,))
            return
        self.wheel.updateValue((sid,), (slot.to_bytes(),))
        first = slot.next_timer_ms()
        if armed_at is None or first < armed_at:
            self.handle.registerTimer(first)

    def close(self) -> None:
        pass
