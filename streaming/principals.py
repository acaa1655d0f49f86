"""The stateful operator with one state entry per principal (``pidquota.state.layout=principals``).

``streaming/operator.py`` keeps a group of principals in one state row, so a batch
that touches one principal of a group rewrites the whole group: at a million
principals, a batch touching 1% of them rewrites all of the state. Here the same
groups are Spark's grouping keys for ``transformWithStateInPandas``, but each
principal is its own entry of a MapState (``quota``: principal -> timer, quota
bytes), so a batch writes the principals it touched and nothing else. Eviction
timers live in the wheel (``quota/wheel.py``), a second MapState of slots, with a
Spark timer at the earliest timer of each slot.

The judging is ``streaming/operator.py``'s, call for call, so decisions, metrics
and evictions are those of the group layout (``tests/streaming/test_state_groups.py``).
It costs one state read and one write per principal touched (a round trip to
the JVM each): measured in ``benchmarks/state_scale.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from pidquota.quota import QuotaSettings, QuotaSource, resolve
from pidquota.quota.wheel import Slot, slot_width
from pidquota.streaming.columns import DEAD_PRINCIPAL
from pidquota.streaming.operator import dead_letters, frame, judge_principal, on_timeout, unfold

QUOTA_KEY = StructType([StructField("principal", StringType())])
QUOTA_VALUE = StructType([StructField("timer", LongType()), StructField("blob", BinaryType())])
SLOT_KEY = StructType([StructField("slot", LongType())])
SLOT_VALUE = StructType([StructField("entries", BinaryType())])


class MapStates:
    """:class:`pidquota.quota.states.PrincipalStates`'s interface (what ``judge_principal`` and
    ``on_timeout`` call) over the ``quota`` MapState, one read per principal at most,
    remembering the timers set in this call for the wheel (``moved``)."""

    def __init__(self, quota) -> None:
        self.quota = quota
        self.seen: dict[str, tuple[int, bytes] | None] = {}
        self.moved: dict[str, int] = {}

    def _entry(self, principal: str) -> tuple[int, bytes] | None:
        if principal not in self.seen:
            value = self.quota.getValue((principal,))
            self.seen[principal] = None if value is None else (int(value[0]), bytes(value[1]))
        return self.seen[principal]

    def timer(self, principal: str) -> int | None:
        entry = self._entry(principal)
        return None if entry is None else entry[0]

    def get(self, principal: str) -> bytes | None:
        entry = self._entry(principal)
        return None if entry is None else entry[1]

    def put(self, principal: str, blob: bytes, timer_ms: int) -> None:
        self.quota.updateValue((principal,), (int(timer_ms), blob))
        self.seen[principal] = (int(timer_ms), blob)
        self.moved[principal] = int(timer_ms)

    def set_timer(self, principal: str, timer_ms: int) -> None:
        self.put(principal, self._entry(principal)[1], timer_ms)

    def remove(self, principal: str) -> None:
        if self._entry(principal) is not None:  # (no write for a principal that has no state)
            self.quota.removeKey((principal,))
        self.seen[principal] = None
        self.moved.pop(principal, None)


class PrincipalProcessor(StatefulProcessor):
    """One group of principals per grouping key; one MapState entry per principal.

    Timers, in event-time ms, follow Spark's rule (a timer fires in the first batch
    whose watermark is past it): the wheel's slot ``s`` has a Spark timer at its
    earliest entry, and firing looks at the entries whose own timer passed.
    Worked example, W = 256 s (slots of 1 s): principal a judged with its timer at
    70,500 is written to ``quota`` and added to slot 70, which gets a Spark timer at
    70,500. The first batch with the watermark past 70,500 fires it; a is evicted
    if its state is spent, or re-armed into a later slot."""

    def __init__(self, quotas: QuotaSource, settings: QuotaSettings, replay_until: int | None = None):
        self.quotas, self.settings, self.replay_until = quotas, settings, replay_until
        self.width = slot_width(settings.window_ms)

    def init(self, handle) -> None:
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
        states = MapStates(self.quota)
        judged = [
            judge_principal(
                p, s, states, watermark, resolve(snapshot, p), stale, self.settings, self.replay_until
            )
            for p, s in unfold(pdf).items()
        ]
        self._file(states.moved)
        if judged:
            yield frame(judged)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        """A slot's earliest timer passed: look at its principals that are due."""
        watermark = timerValues.getCurrentWatermarkInMs()
        sid = expiredTimerInfo.getExpiryTimeInMs() // self.width
        value = self.wheel.getValue((sid,))
        if value is not None:
            slot = Slot.from_bytes(bytes(value[0]))
            states = MapStates(self.quota)
            for principal, timer in slot.take_due(watermark):
                if states.timer(principal) == timer:  # else stale: touched or evicted since
                    on_timeout(states, principal, watermark, self.settings)
            self._save(sid, slot, None)
            self._file(states.moved)
        return iter(())

    def _file(self, moved: dict[str, int]) -> None:
        """Add the principals' new timers to their slots."""
        by_slot: dict[int, dict[str, int]] = {}
        for principal, timer in moved.items():
            by_slot.setdefault(timer // self.width, {})[principal] = timer
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
