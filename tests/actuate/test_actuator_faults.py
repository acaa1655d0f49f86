"""actuate/actuator.py when Kafka fails it: a cluster and a journal that refuse on demand (the
real broker's paths are tests/actuate/test_actuator.py). Whatever fails is tried again at the
next batch; nothing pidquota set is left behind; each step is journalled before it is made."""

from __future__ import annotations

from dataclasses import replace

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

    def default_quota(self, control):
        return None  # no <default> quotas (DefaultsCluster has some)

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


def test_a_restart_finishes_an_undo_whose_hold_is_not_over():
    """Issue 45: an ``undoing`` record means pidquota was letting the control go (allow-list,
    a shared address, a lift); a restart rewrote it as ``set`` and held it again."""
    act, cluster, journal, _ = _actuator()
    journal.records[KEY] = Entry(KEY, "User:crash", 200.0, 1.0, NOW + 600_000, "undoing")
    cluster.values[KEY] = 1.0
    [row] = act.reconcile()
    assert row.action == "undo" and cluster.values[KEY] == 200.0 and journal.records == {}
    assert act.acted == {}


# -- issue 45 §2: a principal's controls live and die together -------------------------------

DENY_TOPIC = deny_writes().controls("User:crash")[1][0]


def test_one_failed_undo_never_brings_the_principal_s_other_controls_back():
    act, cluster, _, clock = _actuator(deny_writes())
    act({"User:crash": NOW})
    assert all(cluster.values.get(c) for c, _ in deny_writes().controls("User:crash"))
    cluster.refuse = {DENY_TOPIC}  # one ACL delete fails after the hold
    clock.t += 120
    act({})
    before = list(cluster.log)
    for _ in range(3):
        clock.t += 10
        rows = act({})
        assert [r.action for r in rows] == ["failed"], rows  # the one undo, tried again; nothing applied
    assert [e for e in cluster.log[len(before) :] if e[0] == "write"] == []
    cluster.refuse = set()
    clock.t += 10
    assert [r.action for r in act({})] == ["undo"]
    assert not any(cluster.values.get(c) for c, _ in deny_writes().controls("User:crash"))
    assert act.acted == {}


def test_a_control_the_operator_removed_while_pidquota_was_down_is_not_created_again():
    act, cluster, journal, clock = _actuator(deny_writes())
    act({"User:crash": NOW + 600_000})
    cluster.values[DENY_TOPIC] = False  # the operator deletes pidquota's DENY on topic *
    restarted = Actuator(deny_writes(), RAILS, cluster, journal, clock)
    restarted.reconcile()
    clock.t += 10
    restarted({"User:crash": NOW + 600_000})
    assert cluster.values[DENY_TOPIC] is False


def test_an_expired_setting_entry_whose_undo_finds_the_journal_down_is_not_set_again():
    act, cluster, journal, clock = _actuator()
    journal.write(Entry(KEY, "User:crash", None, 1.0, NOW - 1, "setting"))
    journal.down = True
    rows = act.reconcile()
    assert [r.action for r in rows] == ["failed"]
    clock.t += 10
    act({})
    assert cluster.values.get(KEY) is None and not any(e[0] == "write" for e in cluster.log)


# -- issue 45 §3: what is pending counts against the cap ------------------------------------


def test_principals_whose_undo_is_pending_count_against_the_cap():
    cluster, clock = Cluster(), Clock()
    act = Actuator(request_quota(1.0), Rails(hold_ms=60_000, cap=2), cluster, FakeJournal(cluster), clock)
    act({"User:a": NOW, "User:b": NOW})
    cluster.refuse = {"all"}
    clock.t += 120
    act({})  # both undos fail: still held
    cluster.refuse = set()
    cluster.refuse = {
        QuotaKey("user", "a", "request_percentage"),
        QuotaKey("user", "b", "request_percentage"),
    }
    rows = act({"User:c": NOW + 200_000, "User:d": NOW + 200_000})
    assert {r.principal: r.action for r in rows if r.principal in ("User:c", "User:d")} == {
        "User:c": "skipped",
        "User:d": "skipped",
    }
    assert cluster.values.get(QuotaKey("user", "c", "request_percentage")) is None


def test_a_slot_freed_by_an_undo_is_used_in_the_same_batch():
    cluster, clock = Cluster(), Clock()
    act = Actuator(request_quota(1.0), Rails(hold_ms=60_000, cap=1), cluster, FakeJournal(cluster), clock)
    act({"User:a": NOW})
    clock.t += 120
    rows = act({"User:c": NOW + 200_000})
    assert {(r.principal, r.action) for r in rows} == {("User:a", "undo"), ("User:c", "apply")}


# -- issue 45 §6: the operator's stricter default wins --------------------------------------


class DefaultsCluster(Cluster):
    def __init__(self, defaults: dict):
        super().__init__()
        self.defaults = defaults  # (entity_type, key) -> the <default> entity's value

    def default_quota(self, control):
        return self.defaults.get((control.entity_type, control.key))


def test_a_stricter_default_is_never_loosened_by_a_user_level_quota():
    cluster = DefaultsCluster({("user", "request_percentage"): 0.5})
    act = Actuator(request_quota(1.0), RAILS, cluster, FakeJournal(cluster), Clock())
    [row] = act({"User:crash": NOW})
    assert row.action == "keep" and "<default>" in row.note and row.value == 0.5
    assert cluster.values.get(KEY) is None


def test_a_looser_default_is_tightened_as_before():
    cluster = DefaultsCluster({("user", "request_percentage"): 200.0})
    act = Actuator(request_quota(1.0), RAILS, cluster, FakeJournal(cluster), Clock())
    [row] = act({"User:crash": NOW})
    assert row.action == "apply" and cluster.values[KEY] == 1.0


def test_a_principal_undone_at_the_restart_and_throttled_again_is_retried_when_its_apply_fails():
    """Review of issue 45: the restart's undo of an expired record marked the control as ended
    for good, so a principal throttled again whose first apply failed was never tried again."""
    cluster = Cluster()
    journal = FakeJournal(cluster)
    clock = Clock()
    first = Actuator(request_quota(1.0), RAILS, cluster, journal, clock)
    first({"User:crash": NOW + 60_000})
    assert cluster.values[KEY] == 1.0
    clock.t += 120  # the run was killed; its hold is over when the next one starts
    again = Actuator(request_quota(1.0), RAILS, cluster, journal, clock)
    assert [r.action for r in again.reconcile()] == ["undo"]
    assert cluster.values[KEY] is None
    cluster.refuse = {KEY}
    assert [r.action for r in again({"User:crash": int(clock.t * 1000) + 60_000})] == ["failed"]
    cluster.refuse = set()
    clock.t += 1
    assert [r.action for r in again({"User:crash": int(clock.t * 1000) + 60_000})] == ["apply"]
    assert cluster.values[KEY] == 1.0


@pytest.mark.parametrize("path", ["re-set at the restart", "undo at the restart", "undo at the end"])
def test_a_fenced_run_changes_nothing_on_its_retry_paths(path):
    """Review of issue 45 §1: another run took the journal over; this run's retry paths (a
    'setting' entry set again, an undo) journal first, are fenced there, and touch nothing."""
    from pidquota.actuate.journal import SETTING, JournalFenced

    cluster = Cluster()
    journal = FakeJournal(cluster)
    clock = Clock()
    until = NOW + (60_000 if path == "re-set at the restart" else -1)
    journal.records[KEY] = Entry(KEY, "User:crash", None, 1.0, until, SETTING if "re-set" in path else "set")
    cluster.values[KEY] = None if "re-set" in path else 1.0
    act = Actuator(request_quota(1.0), RAILS, cluster, journal, clock)

    def fenced(*_):
        raise JournalFenced("another pidquota run took over the journal topic 'j'")

    journal.write = journal.remove = fenced
    if path == "undo at the end":
        journal.records[KEY] = replace(journal.records[KEY], until_ms=NOW + 60_000)
        act.reconcile()  # kept: current
        rows = act.lift_all()
    else:
        rows = act.reconcile()
    assert [r.action for r in rows] == ["failed"] and "took over" in rows[0].note
    assert not [e for e in cluster.log if e[0] == "write"]  # the cluster untouched
    assert act.fenced is not None and act({"User:crash": NOW + 60_000}) == []  # and acts no more


def test_a_dry_run_of_the_plug_in_never_reads_its_state_topic():
    """The plug-in's state is pidquota's own: a dry run's look at the cluster does not read it (a
    state topic that does not exist yet cost each batch a read's whole timeout)."""
    from pidquota.actuate.controls import ThrottleKey
    from pidquota.actuate.mechanisms import broker_plugin

    class NoState(Cluster):
        def read(self, control):
            assert not isinstance(control, ThrottleKey), "the state topic was read"
            return super().read(control)

    act = Actuator(broker_plugin(), RAILS, None, None, Clock(), peek=NoState())
    [row] = act({"User:crash": NOW + 60_000})
    assert (row.action, row.before, row.value, row.dry_run) == ("apply", False, True, True)
