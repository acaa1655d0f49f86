"""The closed loop on the session's broker (issue 42 §2): a user acted on that is still granted
over twice its quota is stepped up, with a (user, client-id) quota on its flooding client, and
down again as its rate falls; every step is journalled and undone exactly, a restart keeps the
step it finds, and an operator's stricter quota is never loosened."""

from __future__ import annotations

import logging

import pytest
from harness.acting import client_quotas, new_user

from pidquota.actuate.controls import AclBinding, ClientQuotaKey, QuotaKey
from pidquota.actuate.runner import BatchActuator, cluster_options
from pidquota.conf.loader import load

pytestmark = pytest.mark.kafka

T0 = 1_900_000_000.0


class Clock:
    def __init__(self):
        self.t = T0

    def __call__(self) -> float:
        return self.t


def _actuator(kafka, journal, clock, **more) -> BatchActuator:
    config = load(
        None,
        {
            "pidquota.actuator": "on",
            "pidquota.actuator.mechanism": "request-quota",
            "pidquota.actuator.journal.topic": journal.topic,
            "pidquota.actuator.escalation.settle.ms": "5000",
            "producer.id.quota.window.size.seconds": "60",
            # batches back to back: the measure's grace is the brokers' 2 s alone (runner.measure_grace_ms)
            "pidquota.trigger.interval.ms": "0",
            **more,
        },
    )
    return BatchActuator(config, cluster_options(config, kafka.bootstrap), clock=clock)


def _row(principal: str, new_pids: int) -> dict:
    """A metrics row: ``new_pids`` granted and throttled in the batch, quota 5 per minute."""
    return {
        "principal": principal,
        "timestamp": 1,
        "quota": 5.0,
        "tokens": 0.0,
        "admitted": 0,
        "throttled": new_pids,
    }


def _seconds(act, clock, n: int, principal: str, new_pids: int, clients=()) -> list:
    rows = []
    for _ in range(n):
        clock.t += 1
        rows += act([_row(principal, new_pids)], clients=clients)
    return rows


def test_a_user_still_granted_over_twice_its_quota_is_stepped_up_on_its_flooding_client_and_down(
    cluster, kafka
):
    controls, journal, _ = cluster
    user = new_user()
    crash, mine = f"User:{user}", QuotaKey("user", user, "request_percentage")
    theirs = ClientQuotaKey(user, "billing", "request_percentage")
    controls.write(theirs, 50.0)  # the operator's own quota for another of the user's clients
    clock = Clock()
    act = _actuator(kafka, journal, clock)
    try:
        act.start()
        assert [r.action for r in act([_row(crash, 4)])] == ["apply"]
        loop = [(crash, "loop", 3), (crash, "steady", 0)]
        [stepped] = _seconds(act, clock, 5, crash, 3, loop)  # 9 granted in 3 s: 180 per minute
        assert (stepped.action, stepped.control) == (
            "apply",
            "quota user=" + user + ",client-id=loop request_percentage",
        )
        assert stepped.note == "closed loop: step 1 of 1 (180.0 new PIDs granted per window, quota 5)"
        assert client_quotas(controls, user) == {
            "loop": {"request_percentage": 0.1},
            "billing": {"request_percentage": 50.0},
        }
        assert controls.read(mine) == 1.0  # the user's step 0 stays
        assert _seconds(act, clock, 4, crash, 0) == []  # a measure spans 5 s
        [down] = _seconds(act, clock, 1, crash, 0)
        assert (down.action, down.value) == ("undo", None) and down.note.startswith(
            "closed loop: step 0 of 1"
        )
        assert client_quotas(controls, user) == {"billing": {"request_percentage": 50.0}}
        assert [r.action for r in act.stop()] == ["undo"]
    finally:
        act.close()
    assert controls.read(mine) is None and controls.read(theirs) == 50.0 and journal.load() == {}


def test_a_client_that_floods_after_the_step_is_added_to_it_and_too_many_make_it_the_default(cluster, kafka):
    controls, journal, _ = cluster
    user = new_user()
    crash = f"User:{user}"
    clock = Clock()
    act = _actuator(kafka, journal, clock)
    try:
        act.start()
        act([_row(crash, 4)])
        _seconds(act, clock, 5, crash, 3, [(crash, "loop-1", 3)])
        assert set(client_quotas(controls, user)) == {"loop-1"}
        [widened] = _seconds(act, clock, 5, crash, 3, [(crash, "loop-2", 3)])  # still 180 per minute
        assert widened.action == "apply" and widened.note.startswith("closed loop: widened (180.0 new PIDs")
        assert set(client_quotas(controls, user)) == {"loop-1", "loop-2"}
        clients = [(crash, f"loop-{i}", 3) for i in range(3, 6)]
        rows = _seconds(act, clock, 5, crash, 3, clients)  # five flooding ids: the <default> client
        assert sorted(r.action for r in rows) == ["apply", "undo", "undo"]
        assert set(client_quotas(controls, user)) == {None}
        act.stop()
    finally:
        act.close()
    assert client_quotas(controls, user) == {} and journal.load() == {}


def test_without_client_ids_the_users_default_client_is_stepped_and_a_restart_keeps_the_step(cluster, kafka):
    controls, journal, _ = cluster
    user = new_user()
    crash = f"User:{user}"
    clock = Clock()
    first = _actuator(kafka, journal, clock)
    try:
        first.start()
        first([_row(crash, 4)])
        [stepped] = _seconds(first, clock, 5, crash, 3)  # JSON events without client ids
        assert stepped.control == f"quota user={user},client-id=<default> request_percentage"
        assert client_quotas(controls, user) == {None: {"request_percentage": 0.1}}
    finally:
        first.close()  # a crash: nothing lifted

    again = _actuator(kafka, journal, clock)
    try:
        assert [r.action for r in again.start()] == ["keep", "keep"]
        assert again.actuator.extra[crash] == [(ClientQuotaKey(user, None, "request_percentage"), 0.1)]
        assert _seconds(again, clock, 5, crash, 3) == []  # step 1 of 1: nothing stricter to take
        assert sorted(r.control for r in again.stop()) == [
            f"quota user={user} request_percentage",
            f"quota user={user},client-id=<default> request_percentage",
        ]
    finally:
        again.close()
    assert client_quotas(controls, user) == {} and controls.quotas("user", user) == {}
    assert journal.load() == {}


def test_the_operators_stricter_user_quota_is_never_loosened_by_a_client_step(cluster, kafka):
    controls, journal, _ = cluster
    user = new_user()
    crash, key = f"User:{user}", QuotaKey("user", user, "request_percentage")
    controls.write(key, 0.05)  # the operator's, stricter than both steps
    clock = Clock()
    act = _actuator(kafka, journal, clock)
    try:
        act.start()
        assert [r.action for r in act([_row(crash, 4)])] == ["keep"]
        [kept] = _seconds(act, clock, 5, crash, 3, [(crash, "loop", 3)])
        assert kept.action == "keep" and "the operator's user quota (0.05) is as strict" in kept.note
        act.stop()
    finally:
        act.close()
    assert controls.read(key) == 0.05 and client_quotas(controls, user) == {} and journal.load() == {}


def test_deny_writes_is_not_taken_for_a_user_that_writes_without_an_allow_acl(cluster, kafka, caplog):
    """The session's broker lets everyone write what has no ACL (allow.everyone.if.no.acl.found,
    which Kafka does not show over DescribeConfigs): its users write without an ALLOW ACL, so a
    DENY on every topic would close them to every user; the step is not taken, and said once."""
    controls, journal, _ = cluster
    user = new_user()
    crash = f"User:{user}"
    clock = Clock()
    act = _actuator(kafka, journal, clock, **{"pidquota.actuator.escalation.deny.writes": "true"})
    try:
        with caplog.at_level(logging.INFO, logger="pidquota.actuate"):
            act.start()
            assert act.loop.steps == 2 and act.deny  # an authorizer on every broker; the rest hidden
            act([_row(crash, 4)])
            rows = _seconds(act, clock, 16, crash, 3, [(crash, "loop", 3)])  # steps 1 and 2
        assert act.loop.level(crash) == 2
        assert [r.control for r in rows] == [f"quota user={user},client-id=loop request_percentage"]
        [line] = [r.getMessage() for r in caplog.records if "does not deny writes" in r.getMessage()]
        assert line == (
            f"actuator: the closed loop does not deny writes to {crash}: no ALLOW ACL names it, so this "
            "cluster lets users write without one"
        )
        act.stop()
    finally:
        act.close()
    assert controls.read(AclBinding(crash, "WRITE", "DENY", "TOPIC", "*")) is False and journal.load() == {}
