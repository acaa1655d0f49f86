"""Each broker's verdict on pidquota's plug-in state (actuate/obedience.py): pure, clock-free."""

from __future__ import annotations

import json

from pidquota.actuate.obedience import GRACE_MS, STALE_MS, Report, Verdict, said, verdicts

S = 1000


def report(broker: int, at: int, obeying: bool = True, heartbeat: int = 120 * S, why: str = "") -> Report:
    return Report(broker, at, obeying, why, heartbeat, 1, 0)


def test_the_docstrings_example():
    first = 100 * S
    assert verdicts({}, [1], first, 110 * S) == [Verdict(1, None, "no report yet")]
    reports = {
        1: report(1, 123 * S),
        2: report(2, 90 * S),
        3: report(3, 124 * S, obeying=False, why="pidquota's heartbeat is older than its bound"),
    }
    got = {v.broker: v for v in verdicts(reports, [1, 2, 3], first, 125 * S)}
    assert got[1].obeys is True
    assert got[2].obeys is False and got[2].why.startswith(
        "no report from its plug-in since pidquota began to beat"
    )
    assert (
        got[3].obeys is False
        and got[3].why == "its plug-in refuses nothing: pidquota's heartbeat is older than its bound"
    )
    assert said(got[3]).startswith(
        "broker 3 does NOT obey pidquota's plug-in state: its plug-in refuses nothing"
    )


def test_silence_a_stale_report_and_an_old_heartbeat_are_each_not_obeying_after_the_grace():
    first = 100 * S
    after = first + GRACE_MS + S
    assert [v.obeys for v in verdicts({}, [1], first, after)] == [False]  # a broker that never reports
    old = {1: report(1, after - STALE_MS - S)}
    assert "last report is 21 s old" in verdicts(old, [1], first, after)[0].why
    lagging = {1: report(1, after - S, heartbeat=first - 60 * S)}  # obeys a heartbeat of before this run
    assert "has not read this run's heartbeat" in verdicts(lagging, [1], first, after)[0].why
    assert verdicts(lagging, [1], first, first + S)[0].obeys is None  # within the grace: not judged
    assert verdicts({}, [1], None, after) == []  # no heartbeat yet: nothing to judge
    assert [v.broker for v in verdicts({4: report(4, after)}, [1], first, after)] == [
        1,
        4,
    ]  # reported, not listed


def test_a_record_the_plugin_would_not_write_is_no_report():
    good = json.dumps(
        {"broker": 2, "at_ms": 5, "obeying": True, "why": "", "heartbeat_ms": 4, "entries": 0, "refused": 0}
    )
    assert Report.parse(b"broker:2", good.encode()) == Report(2, 5, True, "", 4, 0, 0)
    for key, value in (
        (b"broker:3", good.encode()),  # the key names another broker
        (b"other", good.encode()),
        (b"broker:2", None),
        (None, good.encode()),
        (b"broker:2", b"not json"),
        (b"broker:2", b"[1, 2]"),
        (b"broker:2", json.dumps({"broker": 2}).encode()),
        (b"broker:2", json.dumps({"broker": "x", "at_ms": 1, "obeying": 1, "heartbeat_ms": 1}).encode()),
    ):
        assert Report.parse(key, value) is None, (key, value)
