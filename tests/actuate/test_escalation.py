"""actuate/escalation.py and mechanisms.stricter: the closed loop's steps, pure and clock-free."""

from __future__ import annotations

from pidquota.actuate.controls import AclBinding, ClientQuotaKey
from pidquota.actuate.escalation import Escalation, Verdict
from pidquota.actuate.mechanisms import stricter

W = 60_000
S = 1_000  # one second, in ms


def _loop(steps: int = 2) -> Escalation:
    return Escalation(steps, W, settle_ms=30 * S, grace_ms=2 * S)


def test_the_worked_example_steps_up_twice_down_once_and_a_bounce_doubles_the_wait():
    loop = _loop()
    loop.seed("User:crash", 0, 0)
    loop.observe("User:crash", 7, 5.0, 1 * S)  # within the grace: a change takes that long to bind
    for t in range(3, 31, 3):
        loop.observe("User:crash", 4, 5.0, t * S)  # 40 after the grace
        verdict = loop.judge("User:crash", t * S)
        assert (verdict is None) == (t < 30)
    assert verdict.level == 1 and round(verdict.rate, 1) == 85.7  # 40 * 60 / 28
    assert verdict.reason == "85.7 new PIDs granted per window, quota 5"
    loop.observe("User:crash", 12, 5.0, 45 * S)
    assert loop.judge("User:crash", 59 * S) is None  # a measure spans 30 s
    assert loop.judge("User:crash", 60 * S).level == 2  # 12 * 60 / 28 = 25.7 > 10
    assert loop.judge("User:crash", 90 * S).level == 1  # nothing granted: 0 <= 5, down
    loop.observe("User:crash", 15, 5.0, 100 * S)
    assert loop.judge("User:crash", 120 * S).level == 2  # back at 32 per W: up, a bounce
    assert loop.judge("User:crash", 150 * S) is None  # 0 granted, but the wait is 60 s now
    assert loop.judge("User:crash", 180 * S).level == 1


def test_a_rate_between_the_quota_and_twice_it_keeps_the_step_and_measures_anew():
    loop = _loop()
    loop.seed("User:a", 1, 0)
    loop.observe("User:a", 7, 5.0, 10 * S)  # 7 * 60 / 28 = 15 per W: over 10, so up ...
    loop.observe("User:b", 100, 5.0, 10 * S)  # not acted on: not measured
    assert loop.judge("User:a", 30 * S).level == 2
    loop.observe("User:a", 4, 5.0, 40 * S)  # 4 * 60 / 28 = 8.6: between 5 and 10
    assert loop.judge("User:a", 60 * S) is None
    loop.observe("User:a", 20, 5.0, 61 * S)  # counted from 60 s with no grace: the step stayed
    assert loop.judge("User:a", 89 * S) is None  # a measure spans 30 s
    # at the top and still over: 40 per W, nothing stricter, so the same step, widened
    assert loop.judge("User:a", 90 * S) == Verdict(2, 40.0, 5.0, widen=True)
    assert loop.level("User:a") == 2 and loop.judge("User:b", 90 * S) is None


def test_no_quota_no_step_and_a_forgotten_principal_starts_at_its_seeded_step():
    loop = _loop(steps=1)
    loop.seed("User:free", 0, 0)
    loop.observe("User:free", 500, None, 10 * S)
    assert loop.judge("User:free", 60 * S) is None  # unlimited: nothing to compare with
    loop.seed("User:x", 5, 0)  # a restart's level, bounded by the ladder
    assert loop.level("User:x") == 1
    loop.forget("User:x")
    assert loop.level("User:x") == 0


def test_the_first_step_quotas_the_flooding_client_ids_or_the_users_default_client():
    assert stricter("User:crash", 0, ("loop",), 0.1, True) == []
    assert stricter("User:crash", 1, ("loop-b", "loop-a", ""), 0.1, False) == [
        (ClientQuotaKey("crash", "loop-a", "request_percentage"), 0.1),
        (ClientQuotaKey("crash", "loop-b", "request_percentage"), 0.1),
    ]
    [(key, value)] = stricter("User:crash", 1, (), 0.1, False)
    assert key == ClientQuotaKey("crash", None, "request_percentage") and value == 0.1
    assert key.name == "quota user=crash,client-id=<default> request_percentage"


def test_the_second_step_adds_deny_writes_only_where_allowed():
    without = stricter("User:crash", 2, ("loop",), 0.1, False)
    assert without == stricter("User:crash", 1, ("loop",), 0.1, False)
    denied = stricter("User:crash", 2, ("loop",), 0.1, True)
    acls = [c for c, _ in denied if isinstance(c, AclBinding)]
    assert len(acls) == 3 and {a.permission for a in acls} == {"DENY"}


def test_an_init_granted_before_the_step_that_reaches_a_later_batch_is_not_counted():
    """Issue 54, tried as a new user: on the plug-in's input (a trigger every 2 s), one init
    granted just before a narrowed throttle reached a batch 3 s after it; counted, it made
    1 * 3600 / 29 = 123 new PIDs a window against a quota of 5, and the loop widened a throttle
    that held. The grace now spans the input's own delay: twice the trigger, beside the 2 s."""
    from pidquota.actuate.runner import measure_grace_ms
    from pidquota.conf.loader import load

    grace = measure_grace_ms(load(overrides={"pidquota.trigger.interval.ms": "2000"}, environ={}))
    assert grace == 6 * S
    hour = 3_600_000
    for grace_ms, widened in ((2 * S, True), (grace, False)):
        loop = Escalation(1, hour, settle_ms=30 * S, grace_ms=grace_ms)
        loop.seed("User:crash", 0, 0)
        loop.observe("User:crash", 1, 5.0, 3 * S)  # granted before the step, its batch 3 s after
        verdict = loop.judge("User:crash", 31 * S)
        assert (verdict is not None and verdict.level == 1) == widened
