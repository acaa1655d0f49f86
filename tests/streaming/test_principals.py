"""streaming/principals.py without Spark: what a batch reads and writes, and how the wheel
evicts. (tests/streaming/test_state_groups.py runs it in Spark against the group layout.)"""

import pandas as pd
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from pidquota.quota import QuotaSettings, StaticQuotas
from pidquota.quota.wheel import Slot
from pidquota.streaming.principals import PrincipalProcessor

W = 60_000  # slots of 234 ms


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


def processor():
    p = PrincipalProcessor(StaticQuotas({"<default>": 3}), QuotaSettings(window_ms=W, window_num=2))
    handle = FakeHandle()
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
    """Spark's part: every timer before the watermark fires once, then is deleted."""
    for ts in sorted(t for t in handle.timers if t < watermark):
        handle.timers.discard(ts)
        list(p.handleExpiredTimer(("#1",), TimerValues(0, watermark), ExpiredTimerInfo(ts)))


def test_a_batch_writes_the_principals_it_touched_and_one_slot():
    p, handle = processor()
    quota, wheel = handle.maps["quota"], handle.maps["wheel"]
    out = batch(p, 0, **{f"User:u{i}": [(1000, i)] for i in range(50)})
    assert len(out[0]) == 50 and quota.writes == 50 and wheel.writes == 1  # all timers in one slot
    (timer,) = handle.timers
    assert timer == min(v[0] for v in quota.data.values())
    quota.writes = wheel.writes = 0
    batch(p, 0, **{"User:u7": [(2000, 99)]})
    assert quota.writes == 1 and wheel.writes == 1  # u7 alone, and the slot of its new timer


def test_the_wheel_evicts_a_spent_principal_once_its_timer_passes_and_skips_stale_entries():
    p, handle = processor()
    quota, wheel = handle.maps["quota"], handle.maps["wheel"]
    batch(p, 0, **{"User:a": [(1000, 1)], "User:b": [(1000, 2)]})
    (a_timer, _), (b_first, _) = quota.data[("User:a",)], quota.data[("User:b",)]
    batch(p, 0, **{"User:b": [(50_000, 3)]})  # b moves on: its first entry goes stale
    b_timer = quota.data[("User:b",)][0]
    assert b_timer > b_first and sum(len(Slot.from_bytes(v[0])) for v in wheel.data.values()) == 3
    fire(p, handle, a_timer)  # not yet: a timer fires once the watermark is past it
    assert ("User:a",) in quota.data
    fire(p, handle, a_timer + 1)
    assert ("User:a",) not in quota.data and ("User:b",) in quota.data  # b's stale entry dropped unread
    assert [Slot.from_bytes(v[0]).entries for v in wheel.data.values()] == [{"User:b": b_timer}]
    fire(p, handle, b_timer + 1)
    assert quota.data == {} and wheel.data == {} and handle.timers == set()


def test_a_principal_due_but_not_spent_is_re_armed_into_a_later_slot():
    p, handle = processor()
    quota, wheel = handle.maps["quota"], handle.maps["wheel"]
    batch(p, 0, **{"User:a": [(1000, 1)]})
    (timer, blob) = quota.data[("User:a",)]
    quota.data[("User:a",)] = (500, blob)  # as if its timer were set before a late event moved it on
    wheel.data = {(500 // p.width,): (Slot({"User:a": 500}).to_bytes(),)}
    handle.timers = {500}
    fire(p, handle, 600)
    assert quota.data[("User:a",)][0] == timer  # looked at, not evictable: re-armed at its real time
    assert handle.timers == {timer}
