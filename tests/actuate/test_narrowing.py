"""The plug-in's narrowed throttle in the actuator (actuate/actuator.py, mechanisms.broker_plugin):
the flooding client ids alone, picked at the first action, the whole user past MOST_CLIENTS,
and a restart that keeps it narrowed (a cluster and a journal in memory; the broker's side:
tests/plugin/test_plugin_actuator.py)."""

from __future__ import annotations

from test_actuator_faults import NOW, RAILS, Cluster, FakeJournal

from pidquota.actuate.actuator import Actuator
from pidquota.actuate.controls import ClientThrottleKey, ThrottleKey
from pidquota.actuate.mechanisms import broker_plugin

USER = "User:crash"


def _actuator(cluster: Cluster, journal: FakeJournal) -> Actuator:
    return Actuator(broker_plugin(narrow=True), RAILS, cluster, journal, clock=lambda: NOW / 1000)


def _held(cluster: Cluster) -> set:
    return {c for c, v in cluster.values.items() if v}


def test_the_flooding_client_ids_alone_picked_once_and_more_than_three_the_whole_user():
    cluster = Cluster()
    journal = FakeJournal(cluster)
    act = _actuator(cluster, journal)
    [row] = act({USER: NOW + 5_000}, clients={USER: ("loop",)})
    assert row.control == "plug-in throttle for User:crash client id loop"
    assert _held(cluster) == {ClientThrottleKey(USER, "loop")}
    # acted on: kept as picked (the closed loop decides whether it is enough), not re-picked
    act({USER: NOW + 5_000}, clients={USER: ("deploy",)})
    assert _held(cluster) == {ClientThrottleKey(USER, "loop")}
    assert {r.action for r in act.lift_all()} == {"undo"} and _held(cluster) == set()
    [row] = act({USER: NOW + 5_000}, clients={USER: ("a", "b", "c", "d")})  # four: the whole user
    assert row.control == "plug-in throttle for User:crash" and _held(cluster) == {ThrottleKey(USER)}


def test_a_principal_the_input_names_no_client_of_is_throttled_whole():
    cluster = Cluster()
    act = _actuator(cluster, FakeJournal(cluster))
    [row] = act({USER: NOW + 5_000}, clients={USER: ()})
    assert row.control == "plug-in throttle for User:crash" and _held(cluster) == {ThrottleKey(USER)}


def test_a_restart_keeps_a_narrowed_throttle_narrowed():
    cluster = Cluster()
    journal = FakeJournal(cluster)
    _actuator(cluster, journal)({USER: NOW + 5_000}, clients={USER: ("loop",)})
    again = _actuator(cluster, journal)
    assert [r.action for r in again.reconcile()] == ["keep"]
    assert again({USER: NOW + 5_000}) == []  # its retry sets nothing more: not the whole user
    assert _held(cluster) == {ClientThrottleKey(USER, "loop")}


def test_a_restart_keeps_the_closed_loops_whole_user_step_over_a_narrowed_throttle():
    cluster = Cluster()
    journal = FakeJournal(cluster)
    act = _actuator(cluster, journal)
    act({USER: NOW + 5_000}, clients={USER: ("loop",)})
    [row] = act.relevel(USER, [(ThrottleKey(USER), True)], "closed loop: step 1 of 1")
    assert row.action == "apply" and _held(cluster) == {ClientThrottleKey(USER, "loop"), ThrottleKey(USER)}
    again = _actuator(cluster, journal)
    again.reconcile()
    assert again.clients[USER] == ("loop",) and again.extra[USER] == [(ThrottleKey(USER), True)]
    [down] = again.relevel(USER, [], "closed loop: step 0 of 1")  # the step it found can be left
    assert down.action == "undo" and _held(cluster) == {ClientThrottleKey(USER, "loop")}


def test_a_step_left_whose_undo_failed_is_undone_at_the_next_batch():
    cluster = Cluster()
    act = _actuator(cluster, FakeJournal(cluster))
    act({USER: NOW + 5_000}, clients={USER: ("loop",)})
    act.relevel(USER, [(ThrottleKey(USER), True)], "step 1")
    cluster.refuse = {ThrottleKey(USER)}
    [failed] = act.relevel(USER, [], "step 0")
    assert failed.action == "failed" and ThrottleKey(USER) in _held(cluster)
    cluster.refuse = set()
    rows = act({USER: NOW + 5_000})
    assert [(r.action, r.control) for r in rows] == [("undo", "plug-in throttle for User:crash")]
    assert _held(cluster) == {ClientThrottleKey(USER, "loop")} and act.stale == {}


def test_a_client_id_the_plugin_would_not_take_throttles_the_whole_user_and_keys_count_as_java_does():
    from pidquota.actuate.mechanisms import broker_plugin
    from pidquota.actuate.plugin_state import throttle_key

    assert throttle_key(USER, "\U0001f600a") == "c:3:\U0001f600aUser:crash".encode()  # UTF-16 units
    too_long = "x" * 4097
    assert broker_plugin(narrow=True).controls(USER, (), (too_long,)) == [(ThrottleKey(USER), True)]


def test_a_short_hold_does_not_flap_a_relapse_is_held_twice_as_long_each_time():
    """Issue 53: a throttle through the plug-in hides its flood (refused inits are not counted),
    so with a short hold it was undone and applied again every ~30 s. Back within one hold of
    its undo, a principal is held twice as long; after a quiet spell, the base again."""
    from dataclasses import replace

    from test_actuator_faults import Clock

    cluster, clock = Cluster(), Clock()
    journal = FakeJournal(cluster)
    act = Actuator(broker_plugin(), replace(RAILS, hold_ms=20_000), cluster, journal, clock=clock)
    now = lambda: int(clock() * 1000)  # noqa: E731
    holds = []
    for _ in range(4):  # throttled, held, undone, throttled again 5 s after
        [row] = act({USER: now()})
        assert row.action == "apply"
        holds.append(act.acted[USER] - now())
        clock.t += (act.acted[USER] - now()) / 1000 + 1
        assert [r.action for r in act({})] == ["undo"]
        clock.t += 5
    assert holds == [20_000, 40_000, 80_000, 160_000]
    clock.t += 161  # away for longer than its last hold
    [row] = act({USER: now()})
    assert act.acted[USER] - now() == 20_000 and "hold" not in row.note
