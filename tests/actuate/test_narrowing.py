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
