"""quota/wheel.py: the slots of eviction timers."""

import pytest

from pidquota.conf.errors import CorruptStateError
from pidquota.quota.wheel import Slot


def test_due_entries_are_those_past_the_watermark_and_leave_the_slot():
    slot = Slot()
    slot.add("User:a", 120)
    slot.add("User:b", 180)
    slot.add("User:é", 150)
    assert slot.take_due(150) == [("User:a", 120)]  # Spark's rule: timer < watermark
    assert slot.next_timer_ms() == 150
    assert sorted(slot.take_due(181)) == [("User:b", 180), ("User:é", 150)]
    assert len(slot) == 0


def test_a_slot_round_trips_and_a_foreign_one_is_refused():
    slot = Slot({"User:a": 120, "User:é": -5})
    assert Slot.from_bytes(slot.to_bytes()).entries == slot.entries
    assert Slot.from_bytes(Slot().to_bytes()).entries == {}
    with pytest.raises(CorruptStateError, match=r"eviction slot .* \(--fresh\)"):
        Slot.from_bytes(b"PQS\x01" + bytes(4))
    with pytest.raises(CorruptStateError, match="left over"):
        Slot.from_bytes(slot.to_bytes() + b"x")
