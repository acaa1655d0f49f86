"""actuate/: the actuator on a real Apache Kafka broker (the session's): Kafka's controls
read and set, the journal topic, exact undo, an operator's own values and ACLs left alone,
and a restart that reconciles the journal with the cluster.

Each test acts on users of its own and a journal topic of its own."""

from __future__ import annotations

import pytest
from harness.acting import new_user as _user

from pidquota.actuate.actuator import Actuator
from pidquota.actuate.controls import AclBinding, Controls, QuotaKey
from pidquota.actuate.journal import Entry, Journal
from pidquota.actuate.mechanisms import deny_writes, request_quota
from pidquota.actuate.policy import Rails

pytestmark = pytest.mark.kafka

HOLD = 60_000
RAILS = Rails(hold_ms=HOLD, cap=10)
T0 = 1_900_000_000.0  # the tests' wall clock, in seconds


class Clock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_quota_key_is_set_read_and_removed_alone(cluster):
    controls, _, _ = cluster
    user = _user()
    rate, percent = QuotaKey("user", user, "producer_byte_rate"), QuotaKey("user", user, "request_percentage")
    assert controls.read(percent) is None
    controls.write(rate, 1000.0)
    controls.write(percent, 1.0)
    assert controls.quotas("user", user) == {"producer_byte_rate": 1000.0, "request_percentage": 1.0}
    controls.write(percent, None)
    assert controls.quotas("user", user) == {"producer_byte_rate": 1000.0}


def test_an_acl_is_created_and_deleted_exactly(cluster):
    controls, _, _ = cluster
    principal = f"User:{_user()}"
    ours = AclBinding(principal, "WRITE", "DENY", "TOPIC", "*")
    near = AclBinding(principal, "WRITE", "DENY", "TOPIC", "orders")  # the operator's, alike but not the same
    controls.write(near, True)
    assert controls.read(ours) is False
    controls.write(ours, True)
    assert controls.read(ours) is True
    controls.write(ours, False)
    assert controls.read(ours) is False and controls.read(near) is True


def test_undo_puts_the_operators_quota_back_and_removes_only_pidquotas_key(cluster):
    controls, journal, _ = cluster
    alice, bob = _user(), _user()
    controls.write(QuotaKey("user", alice, "request_percentage"), 200.0)
    controls.write(QuotaKey("user", alice, "producer_byte_rate"), 5000.0)
    clock = Clock()
    actuator = Actuator(request_quota(1.0), RAILS, controls, journal, clock)
    rows = actuator({f"User:{alice}": int(T0 * 1000) + 5000, f"User:{bob}": int(T0 * 1000) + 5000})
    assert {(r.principal, r.action, r.before, r.value) for r in rows} == {
        (f"User:{alice}", "apply", 200.0, 1.0),
        (f"User:{bob}", "apply", None, 1.0),
    }
    assert controls.quotas("user", alice) == {"request_percentage": 1.0, "producer_byte_rate": 5000.0}
    assert controls.quotas("user", bob) == {"request_percentage": 1.0}
    assert {e.principal for e in journal.load().values()} == {f"User:{alice}", f"User:{bob}"}

    clock.t += 30
    assert actuator({}) == []  # held
    clock.t += 40  # throttle end (5 s) + hold (60 s) passed
    rows = actuator({})
    assert {(r.principal, r.action, r.value) for r in rows} == {
        (f"User:{alice}", "undo", 200.0),
        (f"User:{bob}", "undo", None),
    }
    assert controls.quotas("user", alice) == {"request_percentage": 200.0, "producer_byte_rate": 5000.0}
    assert controls.quotas("user", bob) == {}
    assert journal.load() == {}


def test_a_value_the_operator_changed_meanwhile_is_left_and_said(cluster):
    controls, journal, _ = cluster
    carol = _user()
    clock = Clock()
    actuator = Actuator(request_quota(1.0), RAILS, controls, journal, clock)
    actuator({f"User:{carol}": int(T0 * 1000)})
    controls.write(QuotaKey("user", carol, "request_percentage"), 50.0)  # the operator, by hand
    clock.t += 61
    [row] = actuator({})
    assert row.action == "left" and row.value == 50.0 and "left as it is" in row.note
    assert controls.quotas("user", carol) == {"request_percentage": 50.0}
    assert journal.load() == {}


def test_a_quota_the_operator_set_stricter_is_kept_and_not_journalled(cluster):
    controls, journal, _ = cluster
    dan = _user()
    controls.write(QuotaKey("user", dan, "request_percentage"), 0.5)
    actuator = Actuator(request_quota(1.0), RAILS, controls, journal, Clock())
    [row] = actuator({f"User:{dan}": int(T0 * 1000)})
    assert row.action == "keep" and row.value == 0.5
    assert journal.load() == {}
    assert controls.quotas("user", dan) == {"request_percentage": 0.5}


def test_an_acl_the_operator_already_had_is_never_created_nor_deleted(cluster):
    controls, journal, _ = cluster
    principal = f"User:{_user()}"
    theirs = AclBinding(principal, "WRITE", "DENY", "TOPIC", "*")
    controls.write(theirs, True)
    clock = Clock()
    actuator = Actuator(deny_writes(), RAILS, controls, journal, clock)
    rows = actuator({principal: int(T0 * 1000)})
    assert {r.control: r.action for r in rows} == {
        c.name: ("keep" if c == theirs else "apply") for c, _ in deny_writes().controls(principal)
    }
    assert theirs not in journal.load() and len(journal.load()) == 2
    assert all(controls.read(c) for c, _ in deny_writes().controls(principal))
    clock.t += 61
    assert sorted(r.action for r in actuator({})) == ["undo", "undo"]
    assert controls.read(theirs) is True
    assert [controls.read(c) for c, _ in deny_writes().controls(principal) if c != theirs] == [False, False]


def test_a_restart_undoes_what_expired_keeps_what_is_current_and_finishes_a_half_done_change(cluster):
    controls, journal, options = cluster
    short, long_, half = _user(), _user(), _user()
    clock = Clock()
    first = Actuator(request_quota(1.0), RAILS, controls, journal, clock)
    now = int(T0 * 1000)
    first({f"User:{short}": now, f"User:{long_}": now + 600_000})
    # a crash between the journal record and the change: the record is there, the quota is not
    key = QuotaKey("user", half, "request_percentage")
    journal.write(Entry(key, f"User:{half}", None, 1.0, now + 600_000, "setting"))
    del first  # kill -9: nothing undone

    clock.t += 120  # past the short one's throttle and hold
    second = Actuator(request_quota(1.0), RAILS, Controls(options), Journal(options, journal.topic), clock)
    rows = {r.principal: r for r in second.reconcile()}
    assert rows[f"User:{short}"].action == "undo"
    assert rows[f"User:{long_}"].action == "keep"
    assert rows[f"User:{half}"].action == "apply" and "set again" in rows[f"User:{half}"].note
    assert controls.quotas("user", short) == {}
    assert controls.quotas("user", long_) == {"request_percentage": 1.0}
    assert controls.quotas("user", half) == {"request_percentage": 1.0}
    assert set(second.acted) == {f"User:{long_}", f"User:{half}"}

    lifted = second.lift_all()
    assert sorted(r.action for r in lifted) == ["undo", "undo"]
    assert controls.quotas("user", long_) == {} and controls.quotas("user", half) == {}
    assert journal.load() == {}


def test_a_dry_run_changes_nothing(cluster):
    controls, _, _ = cluster
    erin = _user()
    clock = Clock()
    actuator = Actuator(request_quota(1.0), RAILS, clock=clock)
    [row] = actuator({f"User:{erin}": int(T0 * 1000)})
    assert row.action == "apply" and row.dry_run
    assert controls.quotas("user", erin) == {}
    clock.t += 61
    [row] = actuator({})
    assert row.action == "undo" and row.dry_run


def test_a_journal_with_foreign_and_crafted_records_changes_nothing_and_lift_restores(cluster):
    """Issue 45 §4 on the broker: crafted expired records for another user's byte rate and an
    ALLOW ALL, a non-JSON, a null-valued and an extra-field record sit in the journal beside
    pidquota's own; the restart and lift apply none of them, and pidquota's control comes back
    exactly as the operator had it."""
    import json

    from kafka import KafkaProducer

    controls, journal, options = cluster
    victim, offender = _user(), _user()
    controls.write(QuotaKey("user", victim, "producer_byte_rate"), 1_048_576.0)
    controls.write(QuotaKey("user", offender, "request_percentage"), 200.0)
    first = Actuator(request_quota(1.0), RAILS, controls, journal, Clock())
    first({f"User:{offender}": int(T0 * 1000)})
    assert controls.quotas("user", offender) == {"request_percentage": 1.0}

    byte_rate = QuotaKey("user", victim, "producer_byte_rate")
    allow = AclBinding(f"User:{victim}", "ALL", "ALLOW", "TOPIC", "*")
    crafted = [
        (byte_rate, Entry(byte_rate, f"User:{victim}", None, 1_048_576.0, 0).to_json()),
        (allow, Entry(allow, f"User:{victim}", False, True, 2**62, "setting").to_json()),
        (byte_rate, b"not json"),
        (allow, b"null"),
        (byte_rate, json.dumps({"extra": 1}).encode()),
    ]
    producer = KafkaProducer(bootstrap_servers=options["kafka.bootstrap.servers"])
    for control, value in crafted:
        kind = "quota" if isinstance(control, QuotaKey) else "acl"
        key = json.dumps({"kind": kind, **control.__dict__}, sort_keys=True).encode()
        producer.send(journal.topic, key=key, value=value).get(timeout=10)
    producer.close()

    again = Actuator(request_quota(1.0), RAILS, Controls(options), Journal(options, journal.topic), Clock())
    rows = again.reconcile()
    assert {r.principal for r in rows} == {f"User:{offender}"}
    assert controls.quotas("user", victim) == {"producer_byte_rate": 1_048_576.0}
    assert not controls.read(allow)
    assert [r.action for r in again.lift_all()] == ["undo"]
    assert controls.quotas("user", offender) == {"request_percentage": 200.0}
    assert controls.quotas("user", victim) == {"producer_byte_rate": 1_048_576.0}


def test_the_operator_s_stricter_default_is_kept_on_the_broker(cluster):
    """Issue 45 §6: with the user <default> at request_percentage 0.5, a user-level 1.0 would
    loosen it (Kafka's precedence: the user's own value wins); pidquota keeps the default."""
    from pidquota.actuate.controls import QuotaKey as Q

    controls, journal, _ = cluster
    crash = _user()
    # the test's own clients are User:ANONYMOUS: a value of its own keeps the default off them
    anonymous = Q("user", "ANONYMOUS", "request_percentage")
    controls.write(anonymous, 100_000.0)
    try:
        _set_default(controls, 0.5)
        assert controls.default_quota(Q("user", crash, "request_percentage")) == 0.5
        [row] = Actuator(request_quota(1.0), RAILS, controls, journal, Clock())(
            {f"User:{crash}": int(T0 * 1000)}
        )
        assert row.action == "keep" and "<default> (0.5)" in row.note
        assert controls.quotas("user", crash) == {} and journal.load() == {}
    finally:
        _set_default(controls, None)
        controls.write(anonymous, None)
    assert controls.default_quota(Q("user", crash, "request_percentage")) is None


def _set_default(controls, value) -> None:
    """The user <default> entity's request_percentage (AlterClientQuotas with a null name)."""
    from kafka.protocol.admin import AlterClientQuotasRequest

    entry = AlterClientQuotasRequest.EntryData(
        entity=[AlterClientQuotasRequest.EntryData.EntityData(entity_type="user", entity_name=None)],
        ops=[
            AlterClientQuotasRequest.EntryData.OpData(
                key="request_percentage", value=0.0 if value is None else value, remove=value is None
            )
        ],
    )
    response = controls._send(
        AlterClientQuotasRequest(entries=[entry], validate_only=False), "set the default"
    )
    assert all(not r.error_code for r in response.entries)
    import time

    deadline = time.monotonic() + 3
    probe = QuotaKey("user", "x", "request_percentage")
    while controls.default_quota(probe) != value and time.monotonic() < deadline:
        time.sleep(0.05)


def test_two_runs_on_one_journal_fence_and_the_operator_s_value_comes_back_exactly(cluster):
    """Issue 45 §1 on the broker: run B claims the journal run A uses. A's next change is fenced
    before it touches the cluster, B adopts what A set, and B's undo puts the operator's 200
    back (before: B read A's 1.0 as the operator's, and the user ended at 1% for good)."""
    from pidquota.actuate.journal import JournalFenced

    controls, journal, options = cluster
    crash, other = _user(), _user()
    key = QuotaKey("user", crash, "request_percentage")
    controls.write(key, 200.0)
    journal.claim()
    a = Actuator(request_quota(1.0), RAILS, controls, journal, Clock())
    now = int(T0 * 1000)
    a({f"User:{crash}": now})
    assert controls.read(key) == 1.0

    b_journal = Journal(options, journal.topic)
    b_journal.claim()  # run B starts: A is fenced from here on
    b = Actuator(request_quota(0.5), RAILS, Controls(options), b_journal, Clock())
    assert [r.action for r in b.reconcile()] == ["keep"]  # A's record, adopted: before is still 200
    rows = a({f"User:{crash}": now, f"User:{other}": now})
    assert [r.action for r in rows] == ["failed"] and "took over the journal" in rows[0].note
    assert controls.quotas("user", other) == {}  # fenced before it changed anything
    assert a({f"User:{other}": now}) == []  # and A acts no more
    with pytest.raises(JournalFenced):
        a.lift_all()
    assert controls.read(key) == 1.0  # A's end left it to B
    assert [r.action for r in b.lift_all()] == ["undo"]
    assert controls.read(key) == 200.0 and b_journal.load() == {}
    b_journal.close()


def test_an_existing_journal_topic_that_is_not_compacted_is_refused(cluster, kafka):
    """Issue 45: retention on a delete-policy topic would take away what pidquota holds."""
    from harness.kafka import create

    from pidquota.actuate.journal import JournalError

    _, _, options = cluster
    create(kafka, "not-compacted-journal")
    with pytest.raises(
        JournalError, match="cleanup.policy=delete, not compact.*--add-config cleanup.policy=compact"
    ):
        Journal(options, "not-compacted-journal").ensure()


def test_the_journal_is_written_by_pidquota_s_principal_alone(kafka):
    """Issue 45: at creation the journal and its transactional id get ACLs for pidquota's
    principal (its SASL login), so on a cluster that lets everyone in where no ACL is found,
    another user can neither write the journal nor take its transactional id over."""
    import uuid

    from kafka import KafkaProducer
    from kafka.errors import KafkaError as ClientError

    from pidquota.actuate.journal import JournalError

    topic = f"guarded-{uuid.uuid4().hex[:8]}"
    journal = Journal(kafka.sasl("pidquota"), topic)
    assert journal.principal == "User:pidquota"
    journal.ensure()
    controls = Controls({"kafka.bootstrap.servers": kafka.bootstrap})
    try:
        assert all(controls.read(b) for b in journal.guard_bindings())
        journal.claim()
        journal.write(Entry(QuotaKey("user", "x", "request_percentage"), "User:x", None, 1.0, 5))
        assert list(journal.load()) == [QuotaKey("user", "x", "request_percentage")]
        bob = kafka.sasl("bob")
        producer = KafkaProducer(
            bootstrap_servers=bob["kafka.bootstrap.servers"],
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="bob",
            sasl_plain_password=bob["kafka.sasl.password"],
            max_block_ms=5000,
        )
        with pytest.raises(ClientError):
            producer.send(topic, key=b"k", value=b"crafted").get(timeout=10)
        producer.close(timeout=2)
        with pytest.raises(JournalError, match="transactional id"):
            Journal(bob, topic).claim()  # nor may bob fence pidquota
    finally:
        journal.close()
        for binding in journal.guard_bindings():
            controls.write(binding, False)
        controls.close()
