"""actuate/actuator.py when Kafka fails it: a cluster and a journal that refuse on demand (the
real broker's paths are tests/actuate/test_actuator.py). Whatever fails is tried again at the
next batch; nothing pidquota set is left behind; each step is journalled before it is made."""

from __future__ import annotations

import pytest

from pidquota.actuate.actuator import Actuator
from pidquota.actuate.controls import ControlError, QuotaKey
from pidquota.actuate.journal import Entry, JournalError
from pidquota.actuate.mechanisms import deny_writes, request_quota
from pidquota.actuate.policy import Rails

T0 = 1_900_000_000.0
NOW = int(T0 * 1000)
RAILS = Rails(hold_ms=60_000, cap=10)


class Cluster:
    """Controls with a value per control; ``refuse`` names the controls (or "all") it refuses to change."""

    def __init__(self):
        self.values: dict = {}
        self.refuse: set = set()
        self.log: list = []

    def read(self, control):
        return self.values.get(control, False if not isinstance(control, QuotaKey) else None)

    def write(self, control, value):
        if control in self.refuse or "all" in self.refuse:
            raise ControlError(f"Kafka refused to change {control.name}")
        self.log.append(("write", control, value))
        self.values[control] = value


class FakeJournal:
    def __init__(self, cluster: Cluster):
        self.records: dict = {}
        self.down = False
        self.cluster = cluster

    def load(self):
        return dict(self.records)

    def write(self, entry: Entry):
        if self.down:
            raise JournalError("cannot write the journal topic 'j'")
        self.cluster.log.append(("journal", entry.control, entry.state))
        self.records[entry.control] = entry

    def remove(self, control):
        if self.down:
            raise JournalError("cannot write the journal topic 'j'")
        self.cluster.log.append(("tombstone", control, None))
        self.records.pop(control, None)


class Clock:
    def __init__(self):
        self.t = T0

    def __call__(self):
        return self.t


def _actuator(mechanism=None):
    cluster = Cluster()
    journal = FakeJournal(cluster)
    clock = Clock()
    return Actuator(mechanism or request_quota(1.0), RAILS, cluster, journal, clock), cluster, journal, clock


KEY = QuotaKey("user", "crash", "request_percentage")


def test_each_step_is_journalled_before_it_is_made():
    act, cluster, _, clock = _actuator()
    act({"User:crash": NOW})
    clock.t += 61
    act({})
    assert cluster.log == [
        ("journal", KEY, "setting"),
        ("write", KEY, 1.0),
        ("journal", KEY, "set"),
        ("journal", KEY, "undoing"),
        ("write", KEY, None),
        ("tombstone", KEY, None),
    ]


def test_a_change_the_cluster_refused_is_tried_again_at_the_next_batch():
    act, cluster, _, clock = _actuator()
    cluster.refuse = {KEY}
    [row] = act({"User:crash": NOW})
    assert row.action == "failed" and "refused" in row.note
    cluster.refuse = set()
    clock.t += 1
    [row] = act({"User:crash": NOW + 1000})
    assert row.action == "apply" and cluster.values[KEY] == 1.0


def test_an_undo_that_fails_is_tried_again_and_the_principal_stays_acted_on_until_it_is_done():
    act, cluster, _, clock = _actuator()
    act({"User:crash": NOW})
    cluster.refuse = {"all"}
    clock.t += 61
    [row] = act({})
    assert row.action == "failed" and act.acted  # still held: not forgotten
    cluster.refuse = set()
    clock.t += 1
    [row] = act({})
    assert row.action == "undo" and cluster.values[KEY] is None and act.acted == {}


def test_a_principal_half_acted_on_gets_the_rest_later_and_all_of_it_undone():
    act, cluster, journal, clock = _actuator(deny_writes())
    topic = next(c for c, _ in deny_writes().controls("User:crash") if c.resource_type == "TOPIC")
    cluster.refuse = {topic}
    rows = act({"User:crash": NOW})
    assert sorted(r.action for r in rows) == ["apply", "apply", "failed"]
    cluster.refuse = set()
    clock.t += 1
    [row] = act({"User:crash": NOW})
    assert row.action == "apply" and row.control == topic.name
    clock.t += 61
    assert sorted(r.action for r in act({})) == ["undo", "undo", "undo"]
    assert not any(cluster.values.values()) and journal.records == {}


def test_a_journal_that_cannot_be_written_changes_nothing_and_stops_nothing():
    act, cluster, journal, clock = _actuator()
    journal.down = True
    [row] = act({"User:crash": NOW})
    assert row.action == "failed" and "journal" in row.note and cluster.values == {}
    journal.down = False
    clock.t += 1
    [row] = act({"User:crash": NOW})
    assert row.action == "apply"


def test_a_restart_sets_a_half_done_change_but_leaves_a_value_the_operator_put_back():
    act, cluster, journal, clock = _actuator()
    half = QuotaKey("user", "half", "request_percentage")
    back = QuotaKey("user", "back", "request_percentage")
    journal.records[half] = Entry(half, "User:half", None, 1.0, NOW + 600_000, "setting")
    journal.records[back] = Entry(back, "User:back", 200.0, 1.0, NOW + 600_000, "set")
    cluster.values[back] = 200.0  # the operator put theirs back while pidquota was down
    rows = {r.principal: r for r in act.reconcile()}
    assert rows["User:half"].action == "apply" and cluster.values[half] == 1.0
    assert rows["User:back"].action == "undo" and "already as the operator had it" in rows["User:back"].note
    assert cluster.values[back] == 200.0 and set(journal.records) == {half}
    assert set(act.acted) == {"User:half"}


def test_a_restart_whose_expired_undo_fails_tries_it_again_at_the_next_batch():
    act, cluster, journal, clock = _actuator()
    journal.records[KEY] = Entry(KEY, "User:crash", None, 1.0, NOW - 1, "set")
    cluster.values[KEY] = 1.0
    cluster.refuse = {"all"}
    [row] = act.reconcile()
    assert row.action == "failed" and act.acted == {"User:crash": NOW - 1}
    cluster.refuse = set()
    [row] = act({})
    assert row.action == "undo" and cluster.values[KEY] is None


@pytest.mark.parametrize("state", ["set", "undoing"])
def test_a_crash_mid_undo_is_finished_at_the_restart(state):
    act, cluster, journal, _ = _actuator()
    journal.records[KEY] = Entry(KEY, "User:crash", 200.0, 1.0, NOW - 1, state)
    cluster.values[KEY] = 200.0 if state == "undoing" else 1.0
    [row] = act.reconcile()
    assert row.action == "undo" and cluster.values[KEY] == 200.0 and journal.records == {}
