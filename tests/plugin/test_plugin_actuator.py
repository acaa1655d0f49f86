"""The actuator's broker-plugin mechanism on a real broker that runs the plug-in (issue 42):
acting on a principal puts it in the state topic, journalled, and its new PIDs are refused;
the undo (the run's end, or `pidquota actuator lift`) takes it out and they are granted again;
the heartbeat keeps the brokers obeying."""

from __future__ import annotations

import time

import pytest
from harness.plugin import plugin_jar
from test_plugin_broker import _new_pid, _until

from pidquota.actuate.actuator import Actuator
from pidquota.actuate.controls import Controls, ThrottleKey
from pidquota.actuate.journal import Journal
from pidquota.actuate.mechanisms import broker_plugin
from pidquota.actuate.plugin_state import PluginState
from pidquota.actuate.policy import Rails

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from harness.kafka import ApacheKafka, create

    node = ApacheKafka(tmp_path_factory.mktemp("plugin-act"), plugin=plugin_jar())
    node.cluster.start()
    create(node, "orders")
    yield node
    node.cluster.stop()


def test_acting_refuses_new_pids_and_the_undo_grants_them_again(broker):
    options = broker.sasl("pidquota")
    state = PluginState(options, "pidquota-throttle-state")
    journal = Journal(options, "pidquota-actuator-journal")
    journal.ensure()
    journal.claim()
    state.ensure(journal.principal)
    state.start_heartbeat(10_000)
    act = Actuator(broker_plugin(), Rails(hold_ms=60_000, cap=5), Controls(options, state=state), journal)
    try:
        assert _new_pid(broker, "crash-loop") == "granted"
        [row] = act({"User:crash-loop": int(time.time() * 1000) + 30_000})
        assert row.action == "apply" and row.control == "plug-in throttle for User:crash-loop"
        assert list(journal.load()) == [ThrottleKey("User:crash-loop")]
        _until(lambda: _new_pid(broker, "crash-loop") == "refused")
        assert _new_pid(broker, "steady") == "granted"
        [row] = act.lift_all()
        assert row.action == "undo" and journal.load() == {}
        _until(lambda: _new_pid(broker, "crash-loop") == "granted")
    finally:
        journal.close()
        act.controls.close()


def test_a_narrowed_throttle_refuses_the_flooding_client_id_alone_and_the_loop_widens_it(broker):
    from pidquota.actuate.runner import BatchActuator
    from pidquota.conf.loader import load

    config = load(
        overrides={
            "pidquota.actuator": "on",
            "pidquota.actuator.mechanism": "broker-plugin",
            "pidquota.actuator.journal.topic": "journal-narrow",
            "pidquota.actuator.escalation.settle.ms": "5000",
            "producer.id.quota.window.size.seconds": "60",
        },
        environ={},
    )
    clock = [time.time()]
    act = BatchActuator(config, broker.sasl("pidquota"), clock=lambda: clock[0])
    user = "User:crash-loop"
    row = {"principal": user, "timestamp": 1, "quota": 5.0, "tokens": 0.0, "admitted": 0, "throttled": 4}
    try:
        act.start()
        [applied] = act([row], clients=[(user, "loop", 4), (user, "deploy", 0)])
        assert applied.control == "plug-in throttle for User:crash-loop client id loop"
        _until(lambda: _new_pid(broker, "crash-loop", "loop") == "refused")
        assert _new_pid(broker, "crash-loop", "deploy") == "granted"  # its other application
        rows = []
        for _ in range(6):  # still 4 a second granted (a client id it did not name): the whole user
            clock[0] += 1
            rows += act([row], clients=[(user, "other", 0)])
        [whole] = rows
        assert (whole.action, whole.control) == ("apply", "plug-in throttle for User:crash-loop")
        assert whole.note.startswith("closed loop: step 1 of 1, the whole user (")
        _until(lambda: _new_pid(broker, "crash-loop", "deploy") == "refused")
        assert sorted(r.control for r in act.stop()) == [
            "plug-in throttle for User:crash-loop",
            "plug-in throttle for User:crash-loop client id loop",
        ]
        _until(lambda: _new_pid(broker, "crash-loop", "loop") == "granted")
    finally:
        act.close()


def test_auto_picks_the_plugin_where_every_broker_runs_it_and_says_so(broker, kafka):
    from pidquota.actuate.runner import BatchActuator, cluster_options
    from pidquota.cli.run_plan import actuator_shown
    from pidquota.conf.loader import load

    config = load(overrides={"pidquota.actuator": "on"}, environ={})
    assert config["pidquota.actuator.mechanism"] == "auto"
    act = BatchActuator(config, cluster_options(config, broker.bootstrap))
    try:
        assert act.mechanism == "broker-plugin" and act.actuator.mechanism.name == "broker-plugin"
        assert "every broker (1) runs pidquota's plug-in" in actuator_shown(config, act)
    finally:
        act.close()
    stock = BatchActuator(config, cluster_options(config, kafka.bootstrap))  # the session's broker
    try:
        assert stock.mechanism == "request-quota+connection-rate"
        assert "the brokers do not run pidquota's plug-in" in actuator_shown(config, stock)
    finally:
        stock.close()


def test_a_state_topic_others_may_write_is_refused_at_start_naming_the_acl(broker, caplog):
    """Issue 53: who may write the state topic decides whom every broker refuses. At every start,
    whatever the principal's kind: another principal's ALLOW (literal or prefixed) stops the
    start with the ACL that lets whom, unless the operator allows it, and then it is said."""
    import logging

    from pidquota.actuate.controls import AclBinding
    from pidquota.actuate.runner import BatchActuator
    from pidquota.conf.errors import ConfigError
    from pidquota.conf.loader import load

    def actuator(**more):
        overrides = {
            "pidquota.actuator": "on",
            "pidquota.actuator.mechanism": "broker-plugin",
            "pidquota.actuator.journal.topic": "journal-writers",
            **more,
        }
        return BatchActuator(load(overrides=overrides, environ={}), broker.sasl("pidquota"))

    admin = Controls({"kafka.bootstrap.servers": broker.bootstrap})
    bob = AclBinding("User:bob", "WRITE", "ALLOW", "TOPIC", "pidquota-throttle-state")
    carol = AclBinding("User:carol", "ALL", "ALLOW", "TOPIC", "pidquota-", pattern="PREFIXED")
    act = actuator()
    try:
        act.start()  # pidquota's own ACLs alone: it starts
        act.stop()
        act.close()
        for binding in (bob, carol):
            admin.write(binding, True)
        act = actuator()
        with pytest.raises(ConfigError) as err:
            act.start()
        text = str(err.value)
        assert "User:bob" in text and "User:carol" in text and "(PREFIXED)" in text, text
        assert "pidquota.actuator.plugin.others.may.write=true" in text and len(text.splitlines()) == 1
        act.close()
        act = actuator(**{"pidquota.actuator.plugin.others.may.write": "true"})
        with caplog.at_level(logging.WARNING, logger="pidquota.actuate"):
            act.start()
        assert any("User:bob" in r.getMessage() for r in caplog.records)
        act.stop()
    finally:
        act.close()
        for binding in (bob, carol):
            admin.write(binding, False)
        admin.close()
