"""``scripts/kafka_broker.py run`` as the docs tell a user to run it: with pidquota's broker
plug-in and JMX (issue 53: trying the docs meant copying a java command line out of ps)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import kafka_broker  # scripts/ is on the path (tests/conftest.py)
import pytest
from harness.plugin import plugin_jar

pytestmark = pytest.mark.kafka

SCRIPT = kafka_broker.ROOT / "scripts" / "kafka_broker.py"


def test_run_installs_the_plugin_opens_jmx_and_takes_settings(tmp_path):
    port, sasl, jmx = kafka_broker.free_ports(3)
    extra = tmp_path / "more.properties"
    extra.write_text("# as the docs' block, pasted\npidquota.plugin.topic=my-state\n")
    cmd = [
        sys.executable, str(SCRIPT), "run", "--dir", str(tmp_path / "k"), "--port", str(port),
        "--sasl-port", str(sasl), "--plugin", str(plugin_jar()), "--jmx-port", str(jmx),
        "--properties", str(extra), "--set", "num.partitions=2",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert "is up" in line and "pidquota's plug-in" in line and f"JMX 127.0.0.1:{jmx}" in line, line
        props = (tmp_path / "k" / "node-1" / "server.properties").read_text()
        for setting in (
            "authorizer.class.name=io.pidquota.plugin.PidQuotaAuthorizer",
            "pidquota.plugin.topic=my-state",
            "num.partitions=2",
        ):
            assert setting in props.splitlines(), props
        cluster = kafka_broker.Cluster(tmp_path / "k")  # JmxTool, as a user would call it
        cluster.nodes[0].jmx_port = jmx
        assert (
            cluster.jmx_value(cluster.nodes[0], "io.pidquota:type=PidQuotaAuthorizer,broker=1", "FailOpen")
            == 1
        )
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def test_run_with_a_jar_that_is_not_there_says_how_to_build_it(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "run", "--dir", str(tmp_path), "--plugin", str(tmp_path / "nope.jar")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "no such jar" in done.stderr and "mvn -B -q -f plugin/pom.xml package" in done.stderr
    started = time.monotonic()
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "run", "--dir", str(tmp_path), "--set", "oops"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        bad.returncode == 1
        and "--set 'oops': give KEY=VALUE" in bad.stderr
        and time.monotonic() - started < 30
    )


def _consecutive_free(n: int) -> int:
    """A port P with P .. P + n - 1 all free on loopback."""
    import socket

    for _ in range(50):
        (base,) = kafka_broker.free_ports(1)
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise AssertionError("no run of free ports")


def test_run_starts_three_nodes_with_the_request_log_at_warn(tmp_path):
    """Issue 54, tried as a new user: the README's production path on three local brokers with
    the request log off needed the Cluster class; `run` took one node, its request log at DEBUG."""
    from kafka import KafkaAdminClient

    port, sasl = _consecutive_free(3), _consecutive_free(3)
    cmd = [
        sys.executable, str(SCRIPT), "run", "--dir", str(tmp_path / "k"), "--port", str(port),
        "--sasl-port", str(sasl), "--nodes", "3", "--request-log", "warn",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert "is up (3 node(s))" in line and "request log at WARN" in line, line
        bootstrap = ",".join(f"127.0.0.1:{port + i}" for i in range(3))
        assert f"PLAINTEXT {bootstrap} " in line, line
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            assert len(admin.describe_cluster()["brokers"]) == 3
        finally:
            admin.close()
        logs = [tmp_path / "k" / "logs" / f"node-{i}" / "kafka-request.log" for i in (1, 2, 3)]
        assert all(log.parent.is_dir() for log in logs)
        assert all(not log.exists() or log.stat().st_size == 0 for log in logs)  # requests, no line
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=90)
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "run", "--dir", str(tmp_path / "z"), "--nodes", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 1 and "--nodes 0: give 1 or more" in bad.stderr
