"""The actuator's broker-plugin mechanism on a real broker that runs the plug-in (issue 42):
acting on a principal puts it in the state topic, journalled, and its new PIDs are refused;
the undo (the run's end, or `pidquota actuator lift`) takes it out and they are granted again;
the heartbeat keeps the brokers obeying."""

from __future__ import annotations

import time

import pytest
from harness.plugin import plugin_jar
from test_plugin_broker import _new_pid, _producer, _until

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
            "pidquota.actuator.plugin.hand.over": "false",  # its end lifts: checked below
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

    named = {
        "pidquota.actuator": "on",
        "pidquota.actuator.mechanism": "broker-plugin",
        "pidquota.actuator.journal.topic": "journal-writers",
    }

    def actuator(**more):
        return BatchActuator(load(overrides={**named, **more}, environ={}), broker.sasl("pidquota"))

    admin = Controls({"kafka.bootstrap.servers": broker.bootstrap})
    bob = AclBinding("User:bob", "WRITE", "ALLOW", "TOPIC", "pidquota-throttle-state")
    carol = AclBinding("User:carol", "ALL", "ALLOW", "TOPIC", "pidquota-", pattern="PREFIXED")
    anonymous = AclBinding("User:ANONYMOUS", "WRITE", "ALLOW", "TOPIC", "pidquota-throttle-state")
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
        act.close()
        for binding in (bob, carol):
            admin.write(binding, False)
        # tried as a new user (issue 54): the principal given is not the run's own login, and the
        # other who may write is the run itself: the fix is the principal, not the ACLs' removal
        admin.write(anonymous, True)
        act = BatchActuator(
            load(overrides={**named, "pidquota.actuator.principal": "User:pidquota"}, environ={}),
            {"kafka.bootstrap.servers": broker.bootstrap},  # PLAINTEXT: User:ANONYMOUS
        )
        with pytest.raises(ConfigError, match="this run logs in as User:ANONYMOUS, not User:pidquota: set "):
            act.start()
    finally:
        act.close()
        for binding in (bob, carol, anonymous):
            admin.write(binding, False)
        admin.close()


def _plugin_actuator(broker, journal: str, **more):
    from pidquota.actuate.runner import BatchActuator
    from pidquota.conf.loader import load

    overrides = {
        "pidquota.actuator": "on",
        "pidquota.actuator.mechanism": "broker-plugin",
        "pidquota.actuator.plugin.narrow": "false",
        "pidquota.actuator.journal.topic": journal,
        "pidquota.actuator.hold.ms": "120000",
        "pidquota.actuator.plugin.hand.over": "false",  # its end lifts, unless a test says otherwise
        **more,
    }
    return BatchActuator(load(overrides=overrides, environ={}), broker.sasl("pidquota"))


ROW = {
    "principal": "User:crash-loop",
    "timestamp": 1,
    "quota": 5.0,
    "tokens": 0.0,
    "admitted": 0,
    "throttled": 4,
}


def _status(broker, journal: str) -> str:
    from harness.cli import run_cli

    done = run_cli(
        "actuator", "status", "--bootstrap", broker.bootstrap,
        "--set", f"pidquota.actuator.journal.topic={journal}",
        "--set", "pidquota.actuator.mechanism=broker-plugin",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_normal_stop_hands_the_throttles_to_the_next_run_and_the_bound_ends_them_if_none_comes(broker):
    """Issue 53: a run's end lifted its throttles, and the next run took 59 s to throttle again
    (about 500 PIDs in the gap). Now the brokers obey them until the last heartbeat is over its
    bound; a run started within it keeps them; without one they end at the bound."""
    handing = {"pidquota.actuator.plugin.hand.over": "true"}
    first = _plugin_actuator(
        broker, "journal-handover", **handing, **{"pidquota.actuator.plugin.heartbeat.ms": "20000"}
    )
    first.start()
    assert [r.action for r in first([ROW])] == ["apply"]
    _until(lambda: _new_pid(broker, "crash-loop") == "refused")
    _until(lambda: [v.obeys for v in first.obedience()] == [True], timeout_s=30)  # its plug-in reported
    assert first.stop() == []  # handed over, not lifted
    said = first.left_behind()
    assert "1 plug-in throttle(s) handed over to the next run" in said and "actuator lift" in said, said
    first.close()
    assert _new_pid(broker, "crash-loop") == "refused"  # the gap of a restart: still refused
    shown = _status(broker, "journal-handover")
    assert "the plug-in's heartbeat is" in shown and "(bound 20 s): the brokers obey the state" in shown, (
        shown
    )
    assert "broker 1 obeys pidquota's plug-in state" in shown and "NOT obeyed" not in shown, shown
    second = _plugin_actuator(
        broker, "journal-handover", **handing, **{"pidquota.actuator.plugin.heartbeat.ms": "5000"}
    )
    rows = second.start()
    assert [r.action for r in rows] == ["keep"], rows
    assert _new_pid(broker, "crash-loop") == "refused"
    assert second.stop() == []
    second.close()
    handed_at = time.monotonic()
    _until(lambda: _new_pid(broker, "crash-loop") == "granted", timeout_s=30)  # no run came: the bound
    assert time.monotonic() - handed_at > 2
    shown = _status(broker, "journal-handover")  # a kill -9's status said "present ... for 311 s more"
    assert "over its bound (5 s): every broker's plug-in refuses nothing (fail open)" in shown, shown
    assert (
        "plug-in throttle for User:crash-loop = present" in shown and "NOT obeyed: the heartbeat is" in shown
    )
    third = _plugin_actuator(broker, "journal-handover", **handing)
    third.start()  # still within its hold: kept
    lift = _plugin_actuator(broker, "journal-handover")
    try:  # `pidquota actuator lift` while the run goes on: the journal is lift's from then on
        lift.actuator.journal.claim("lift")
        assert [r.action for r in lift.actuator.lift_journal()] == ["undo"]
    finally:
        lift.close()
    assert third.stop() == [] and third.left_behind() == ""  # nothing of its own to hand over
    third.close()


def test_each_broker_says_whether_it_obeys_within_seconds_of_acting(broker, tmp_path, caplog):
    """Issue 53: with the plug-in's bootstrap wrong, a broker failed open and granted ~500 PIDs a
    minute while pidquota said THROTTLED, ACTED ON. Each plug-in now reports to pidquota's status
    topic; the run says a broker that does not obey within 30 s of acting through it."""
    import logging

    from harness.kafka import ApacheKafka

    act = _plugin_actuator(broker, "journal-obeys")
    try:
        act.start()
        act([ROW])
        _until(lambda: [v.obeys for v in act.obedience()] == [True], timeout_s=30)
        assert "obeys" in act.obedience()[0].why
    finally:
        act.stop()
        act.close()
    deaf = ApacheKafka(
        tmp_path / "deaf", plugin=plugin_jar(), extra={"pidquota.plugin.bootstrap.servers": "127.0.0.1:1"}
    )
    deaf.cluster.start()
    act = _plugin_actuator(deaf, "journal-deaf")
    try:
        with caplog.at_level(logging.WARNING, logger="pidquota.actuate"):
            act.start()
            act([ROW])
            acted = time.monotonic()
            _until(lambda: [v.obeys for v in act.obedience()] == [False], timeout_s=30)
            _until(
                lambda: any("broker 1 does NOT obey" in r.getMessage() for r in caplog.records), timeout_s=5
            )
        assert time.monotonic() - acted < 30
        assert "no report from its plug-in" in act.obedience()[0].why
        assert _new_pid(deaf, "crash-loop") == "granted"  # what it says is so
        shown = _status(deaf, "journal-deaf")  # and `pidquota actuator status` says it too
        assert "broker 1 does NOT obey pidquota's plug-in state: no report from its plug-in" in shown, shown
    finally:
        act.stop()
        act.close()
        deaf.cluster.stop()


def test_an_unguarded_state_topic_is_guarded_for_pidquotas_principal_or_refused(broker):
    """Issue 53, tried as a new user: pidquota on the PLAINTEXT listener (its principal not
    known) made the state topic without ACLs, where the broker lets everyone in, and the
    throttled user itself could write `switch=off` to it. Now such a start is refused in one
    line; with pidquota.actuator.principal it gets ACLs for that principal alone at start, an
    existing topic too, and the throttled user can no longer write it."""
    from kafka.errors import KafkaError as ClientError

    from pidquota.actuate.runner import BatchActuator
    from pidquota.conf.errors import ConfigError
    from pidquota.conf.loader import load

    def actuator(**more):
        overrides = {
            "pidquota.actuator": "on",
            "pidquota.actuator.mechanism": "broker-plugin",
            "pidquota.actuator.journal.topic": "journal-open",
            "pidquota.actuator.plugin.topic": "open-state",
            "pidquota.actuator.plugin.status.topic": "open-status",
            **more,
        }
        return BatchActuator(
            load(overrides=overrides, environ={}), {"kafka.bootstrap.servers": broker.bootstrap}
        )

    act = actuator()
    with pytest.raises(
        ConfigError, match=r"no ACL lets anyone write it.*set pidquota.actuator.principal=User:NAME"
    ):
        act.start()
    act.close()
    act = actuator(**{"pidquota.actuator.principal": "User:ANONYMOUS"})  # the listener's principal
    try:
        act.start()  # the existing topic, no ACL: guarded now
        producer = _producer(broker, "crash-loop")
        with pytest.raises(ClientError, match="TopicAuthorization"):  # its topic ACL, not a refused init
            producer.send("open-state", key=b"switch", value=b"off").get(timeout=10)
        producer.close(timeout=2)
    finally:
        act.stop()
        act.close()


def test_who_besides_the_brokers_may_write_the_inits_topic_is_refused_or_said(broker, capsys):
    """Issue 54: whoever may write the plug-in's inits topic can have pidquota throttle any user
    (inits made up in its name). At every start: a topic made by pidquota (its READ ACL) passes;
    another principal's WRITE stops a run that acts, naming the ACL, in one line, and is said
    when allowed, in a shadow run or when the run does not act; a topic no ACL guards, where the broker lets
    everyone in, is refused (its ACLs never changed), and given pidquota's READ ACL, the flooding
    user can no longer write it."""
    from kafka.errors import KafkaError as ClientError

    from pidquota.actuate.controls import AclBinding
    from pidquota.actuate.plugin_state import ensure_inits_topic
    from pidquota.cli.preflight import check_inits_writers
    from pidquota.conf.errors import ConfigError
    from pidquota.conf.loader import load

    options = {"kafka.bootstrap.servers": broker.bootstrap}
    acting = load(overrides={"pidquota.actuator": "on"}, environ={})
    assert ensure_inits_topic(options, "inits-guarded", 15_000, "User:pidquota")
    check_inits_writers(options, "inits-guarded", "User:pidquota", acting)  # its READ ACL alone
    bob = AclBinding("User:bob", "WRITE", "ALLOW", "TOPIC", "inits-guarded")
    admin = Controls(options)
    try:
        admin.write(bob, True)
        with pytest.raises(ConfigError) as err:
            check_inits_writers(options, "inits-guarded", "User:pidquota", acting)
        text = str(err.value)
        assert "acl ALLOW WRITE on TOPIC:inits-guarded for User:bob" in text and len(text.splitlines()) == 1
        assert "pidquota.actuator.plugin.others.may.write=true" in text
        capsys.readouterr()
        check_inits_writers(options, "inits-guarded", "User:pidquota", load(environ={}))  # not acting: said
        assert "User:bob" in capsys.readouterr().err
        # bob named as the brokers' principal (a plug-in with credentials of its own): his WRITE is theirs
        named = load(
            overrides={"pidquota.actuator": "on", "pidquota.actuator.plugin.brokers.principal": "User:bob"},
            environ={},
        )
        check_inits_writers(options, "inits-guarded", "User:pidquota", named)
        assert capsys.readouterr().err == ""
    finally:
        admin.write(bob, False)
        admin.close()
    assert ensure_inits_topic(options, "inits-open", 15_000, "")  # made with no ACL: open to all
    producer = _producer(broker, "crash-loop")
    try:
        producer.send("inits-open", value=b'{"v":1}').get(timeout=10)  # the flooding user may write it
        for own in ("", "User:ANONYMOUS"):  # an existing topic's ACLs are never changed
            with pytest.raises(ConfigError, match="every principal: no ACL matches the topic"):
                check_inits_writers(options, "inits-open", own, acting)
        shadow = load(overrides={"pidquota.actuator": "on", "pidquota.mode": "shadow"}, environ={})
        check_inits_writers(options, "inits-open", "", shadow)  # a shadow run acts on nobody: said
        reader = AclBinding("User:ANONYMOUS", "READ", "ALLOW", "TOPIC", "inits-open")
        admin = Controls(options)
        try:
            admin.write(reader, True)  # the fix the message names: any ACL closes it
            check_inits_writers(options, "inits-open", "User:ANONYMOUS", acting)
            with pytest.raises(ClientError, match="TopicAuthorization"):
                producer.send("inits-open", value=b'{"v":1}').get(timeout=10)
        finally:
            admin.write(reader, False)
            admin.close()
    finally:
        producer.close(timeout=2)


def _request_logger(broker, level: str) -> None:
    """The broker's ``kafka.request.logger`` level, set live (KIP-412), as an operator would."""
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = broker.admin()
    try:
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.BROKER_LOGGER, "1", configs={"kafka.request.logger": level})],
            raise_on_unknown=False,
            incremental=True,
        )
    finally:
        admin.close()


def test_the_loop_closes_through_kafka_with_the_request_log_off(broker, tmp_path):
    """Issue 54: the brokers' plug-ins publish the InitProducerIds they answer, `pidquota run`
    reads them (--input-format plugin-inits) and throttles through the plug-in: the crash loop's
    new PIDs are refused, another user's granted, with the request log at WARN all along; the
    run's end undoes it exactly."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from pidquota.streaming.outputs.reader import read_output

    _request_logger(broker, "WARN")
    logged = len(broker.request_log_lines())
    quotas = tmp_path / "quotas.json"
    quotas.write_text(
        json.dumps(
            {"users": {"User:per-error": {"producer_ids_rate": 5}, "<default>": {"producer_ids_rate": 1000}}}
        )
    )
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "pidquota", "run", "--output", str(out), "--quotas", str(quotas),
        "--input", f"kafka://{broker.sasl_bootstrap}/pidquota-plugin-inits", "--input-format", "plugin-inits",
        *(x for k, v in broker.sasl("pidquota").items() if k != "kafka.bootstrap.servers"
          for x in ("--set", f"pidquota.{k}={v}")),
        "--set", "producer.id.quota.window.size.seconds=60",
        "--set", "pidquota.actuator=on", "--set", "pidquota.actuator.mechanism=broker-plugin",
        "--set", "pidquota.actuator.journal.topic=journal-loop",
        "--set", "pidquota.actuator.plugin.hand.over=false",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True
    )
    try:
        granted, deadline = 0, time.monotonic() + 240
        while (answer := _new_pid(broker, "per-error", "loop")) == "granted":
            granted += 1
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "never refused"
            time.sleep(0.2)
        assert answer == "refused" and granted >= 5, (answer, granted)
        assert [_new_pid(broker, "per-error", "loop") for _ in range(5)] == ["refused"] * 5
        assert _new_pid(broker, "carol", "steady") == "granted"
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode in (0, 130), stderr[-3000:]
    assert "made the plug-in's inits topic 'pidquota-plugin-inits'" in stderr, stderr[-3000:]
    decisions = read_output(out, "decisions")
    loop = decisions[decisions["principal"] == "User:per-error"]
    # the burst of 5, plus the bucket's refill (5 per 60 s) over the loop's span: a slow machine
    # stretches the loop, and a token that came back is admitted, as KIP-936's B + Q*t allows
    admitted = loop[loop["verdict"] == "ADMIT"]
    span_ms = int(loop["timestamp"].max() - loop["timestamp"].min())
    assert set(loop["verdict"]) == {"ADMIT", "THROTTLE"}
    assert 5 <= len(admitted) <= 5 + span_ms * 5 // 60_000, (len(admitted), span_ms)
    assert read_output(out, "dead-letters").empty
    _until(lambda: _new_pid(broker, "per-error", "loop") == "granted", timeout_s=30)  # the run's end undid it
    assert len(broker.request_log_lines()) == logged  # no request log line all along
    _request_logger(broker, "DEBUG")
