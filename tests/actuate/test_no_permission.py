"""The actuator as a principal without the rights it needs, on a broker of its own that grants
nothing by default (``allow.everyone.if.no.acl.found=false``): one clear line at start
without its journal topic; without ALTER_CONFIGS on the Cluster, a failed action row and a
warning per batch, nothing applied, nothing untracked, and the stream's next batch after the
grant acts and the end lifts it exactly."""

from __future__ import annotations

import logging

import pytest
from harness.kafka import ApacheKafka

from pidquota.actuate.controls import AclBinding, Controls, QuotaKey
from pidquota.actuate.journal import JournalError
from pidquota.actuate.mechanisms import CLUSTER
from pidquota.actuate.runner import BatchActuator
from pidquota.conf.loader import load

pytestmark = pytest.mark.kafka

JOURNAL = "pidquota-actuator-journal"
ME = "User:pidquota"


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    broker = ApacheKafka(
        tmp_path_factory.mktemp("strict-kafka"), extra={"allow.everyone.if.no.acl.found": "false"}
    )
    broker.start()
    admin = Controls({"kafka.bootstrap.servers": broker.bootstrap})  # ANONYMOUS: a super user here
    yield broker, admin
    admin.close()
    broker.stop()


def _actuator(broker) -> BatchActuator:
    config = load(None, {"pidquota.actuator": "on", "pidquota.actuator.mechanism": "request-quota"})
    return BatchActuator(config, broker.sasl("pidquota"))


def _grant(admin: Controls, operation: str, resource_type: str, resource: str) -> None:
    admin.write(AclBinding(ME, operation, "ALLOW", resource_type, resource), True)


ROW = {"principal": "User:crash-loop", "timestamp": 1, "quota": 10.0, "tokens": 0.0, "throttled": 4}
KEY = QuotaKey("user", "crash-loop", "request_percentage")


def test_without_its_journal_topic_the_actuator_says_which_rights_it_lacks(strict):
    broker, _ = strict
    act = _actuator(broker)
    try:
        with pytest.raises(JournalError) as err:
            act.start()
    finally:
        act.close()
    text = str(err.value)
    assert JOURNAL in text and "CREATE" in text and "docs/enforcing.md" in text
    assert len(text.splitlines()) == 1


def test_without_alter_on_the_cluster_each_batch_fails_alone_and_the_grant_lets_it_act(strict, caplog):
    broker, admin = strict
    for operation in ("CREATE", "DESCRIBE", "READ", "WRITE"):
        _grant(admin, operation, "TOPIC", JOURNAL)
    admin.write(KEY, 200.0)  # the operator's own value, exactly as it must come back
    act = _actuator(broker)
    try:
        with pytest.raises(
            JournalError, match=f"transactional id pidquota-journal-{JOURNAL}.*WRITE and DESCRIBE"
        ):
            act.start()  # one owner per journal: its transactional id needs rights too
        for operation in ("DESCRIBE", "WRITE"):
            _grant(admin, operation, "TRANSACTIONAL_ID", f"pidquota-journal-{JOURNAL}")
        assert act.start() == []
        with caplog.at_level(logging.WARNING, logger="pidquota.actuate"):
            rows = act([ROW])
        assert [r.action for r in rows] == ["failed"]
        assert "CLUSTER_AUTHORIZATION_FAILED" in rows[0].note or "uthoriz" in rows[0].note, rows[0].note
        assert any("tried again at the next batch" in r.getMessage() for r in caplog.records)
        assert admin.read(KEY) == 200.0  # nothing applied
        _grant(admin, "DESCRIBE_CONFIGS", "CLUSTER", CLUSTER)
        _grant(admin, "ALTER_CONFIGS", "CLUSTER", CLUSTER)
        rows = act([ROW])  # the next batch: the same principal, still throttled
        assert [(r.action, r.value) for r in rows if r.control == KEY.name] == [("apply", 1.0)]
        assert admin.read(KEY) == 1.0
        undone = act.stop()
        assert [(r.action, r.value) for r in undone] == [("undo", 200.0)]
        assert admin.read(KEY) == 200.0
    finally:
        act.close()


def test_the_acls_pidquota_creates_cover_what_it_asks_at_the_next_start(strict, caplog):
    """Issue 53: every restart warned that pidquota could not read its own topics'
    cleanup.policy: the ACLs it made at their creation lacked DESCRIBE_CONFIGS."""
    from pidquota.actuate.journal import Journal, topic_bindings
    from pidquota.actuate.plugin_state import PluginState

    broker, admin = strict
    grants = [AclBinding(ME, op, "ALLOW", "CLUSTER", CLUSTER) for op in ("CREATE", "ALTER")]
    for grant in grants:  # to create its topics, and their ACLs
        admin.write(grant, True)
    journal, state = (
        Journal(broker.sasl("pidquota"), "acl-journal"),
        PluginState(broker.sasl("pidquota"), "acl-state"),
    )
    try:
        journal.ensure()
        state.ensure(ME)
        with caplog.at_level(logging.WARNING, logger="pidquota"):
            journal.ensure()  # the next start: the topics exist
            state.ensure(ME)
        assert not [r.getMessage() for r in caplog.records if "could not be read" in r.getMessage()]
    finally:
        journal.close()
        state.close()
        for grant in grants + journal.guard_bindings() + topic_bindings(ME, "acl-state"):
            admin.write(grant, False)
