"""streaming/principals.py without Spark: what a batch reads and writes, and how the wheel
evicts. (tests/streaming/test_state_groups.py runs it in Spark against the group layout.)"""

import pandas as pd
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from pidquota.quota import QuotaSettings, StaticQuotas
from pidquota.quota.wheel import SLOT_MS, Slot
from pidquota.streaming.principals import MapStates, PrincipalProcessor

W = 60_000


class FakeMap:
    """A MapState: a dict, counting the writes."""

    def __init__(self):
        self.data, self.writes = {}, 0

    def getValue(self, key):
        return self.data.get(key)

    def updateValue(self, key, value):
        self.data[key], self.writes = value, self.writes + 1

    def removeKey(self, key):
        self.data.pop(key, None)
        self.writes += 1


class FakeHandle:
    def __init__(self):
        self.maps, self.timers = {}, set()

    def getMapState(self, name, key_schema, value_schema):
        return self.maps.setdefault(name, FakeMap())

    def registerTimer(self, ts):
        self.timers.add(ts)


def processor(handle=None, window_ms=W):
    settings = QuotaSettings(window_ms=window_ms, window_num=2)
    p = PrincipalProcessor(StaticQuotas({"<default>": 3}), settings)
    handle = handle or FakeHandle()
    p.init(handle)
    return p, handle


def batch(p, watermark, **events):
    """events: principal -> [(timestamp, pid), ...]"""
    rows = pd.DataFrame(
        {
            "principal": list(events),
            "timestamps": [[t for t, _ in e] for e in events.values()],
            "producer_ids": [[pid for _, pid in e] for e in events.values()],
            "epochs": [[0] * len(e) for e in events.values()],
        }
    )
    return list(p.handleInputRows(("#1",), iter([rows]), TimerValues(0, watermark)))


def fire(p, handle, watermark):
    """Spark's part: each timer before the watermark fires once, in order, and PySpark
    deletes it after its handler returns."""
    for ts in sorted(t for t in handle.timers if t < watermark):
        list(p.handleExpiredTimer(("#1",), TimerValues(0, watermark), ExpiredTimerInfo(ts)))
        handle.timers.discard(ts)


def entries(wheel):
    return {name: t for v in wheel.data.values() for name, t in Slot.from_bytes(v[0]).entries.items()}


def test_a_batch_writes_the_principals_it_touched_and_files_only_new_ones():
    p, handle = processor()
    quota, wheel = handle.maps["quota"], handle.maps["wheel"]
    out = batch(p, 0, **{f"User:u{i}": [(1000, i)] for i in range(50)})
    assert len(out[0]) == 50 and quota.writes == 50 and wheel.writes == 1  # all filed in one slot
    (timer,) = handle.timers
    assert timer == min(v[0] for v in quota.data.values())
    quota.writes = wheel.writes = 0
    batch(p, 0, **{"User:u7": [(2000, 99)]})
    timer7, filed7, _ = quota.data[("User:u7",)]
    assert timer7 > filed7 and quota.writes == 1 and wheel.writes == 0  # a later timer files nothing


def test_the_wheel_evicts_a_spent_principal_once_its_timer_passes_and_refiles_one_that_sent():
    p, handle = processor()
    quota, wheel = handle.maps["quota"], handle.maps["wheel"]
    batch(p, 0, **{"User:a": [(1000, 1)], "User:b": [(1000, 2)]})
    a_timer = quota.data[("User:a",)][0]
    batch(p, 0, **{"User:b": [(50_000, 3)]})  # b sends on: its timer moves, its entry stays
    b_timer, b_filed, _ = quota.data[("User:b",)]
    assert b_filed == a_timer < b_timer and entries(wheel) == {"User:a": a_timer, "User:b": a_timer}
    fire(p, handle, a_timer)  # not yet: a timer fires once the watermark is past it
    assert ("User:a",) in quota.data
    fire(p, handle, a_timer + 1)
    assert ("User:a",) not in quota.data  # a evicted; b filed again under its own timer
    assert quota.data[("User:b",)][:2] == (b_timer, b_timer) and entries(wheel) == {"User:b": b_timer}
    fire(p, handle, b_timer + 1)
    assert quota.data == {} and wheel.data == {} and handle.timers == set()


def test_a_principal_due_but_not_spent_is_re_armed_and_filed_again():
    p, handle = processor()
    quota, wheel = handle.maps["quota"], handle.maps["wheel"]
    batch(p, 0, **{"User:a": [(1000, 1)]})
    timer, _, blob = quota.data[("User:a",)]
    quota.data[("User:a",)] = (500, 500, blob)  # as if its timer were set before a late event moved it on
    wheel.data = {(500 // SLOT_MS,): (Slot({"User:a": 500}).to_bytes(),)}
    handle.timers = {500}
    fire(p, handle, 600)
    assert quota.data[("User:a",)][:2] == (
        timer,
        timer,
    )  # looked at, not evictable: re-armed at its real time
    assert entries(wheel) == {"User:a": timer} and handle.timers == {timer}


def test_a_timer_that_moves_earlier_is_filed_again_and_its_old_entry_goes_stale():
    p, handle = processor()
    quota, wheel = handle.maps["quota"], handle.maps["wheel"]
    batch(p, 0, **{"User:a": [(1000, 1)]})
    timer, filed, blob = quota.data[("User:a",)]
    states = MapStates(quota)
    states.put("User:a", blob, filed - 100)  # e.g. a raised quota refills the bucket sooner
    p._file(states.moved)
    assert quota.data[("User:a",)][:2] == (filed - 100, filed - 100)
    fire(p, handle, filed + 1)  # the earlier entry looks at it and evicts it; the old one is stale
    assert quota.data == {} and wheel.data == {}


def test_a_restart_with_another_window_finds_its_slots():
    p, handle = processor()
    batch(p, 0, **{"User:a": [(1000, 1)]})
    (timer,) = handle.timers
    p, _ = processor(handle, window_ms=10 * W)  # restarted with a window ten times longer
    fire(p, handle, timer + 1)
    (entry,) = handle.maps["quota"].data.values()  # looked at: alive under the longer window, re-armed
    assert entry[0] > timer and entries(handle.maps["wheel"]) == {"User:a": entry[0]}
