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
