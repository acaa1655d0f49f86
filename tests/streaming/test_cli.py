"""The CLI's promises: one-line errors and exit codes, and the --once round trip."""

import json
import os
import subprocess
import sys

import pytest

from streaming.cli import _first_line, main


def run_cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "streaming.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "producer.id.quota.window.nums=3"], "unknown setting 'producer.id.quota.window.nums'"),
        (["--set", "pidquota.spark.shuffle.partitions=zero"], "pidquota.spark.shuffle.partitions = 'zero'"),
        (["--quotas", "/no/such/quotas.json"], "cannot read quota file '/no/such/quotas.json'"),
        (["--input", "/no/such/events.jsonl", "--once"], "input '/no/such/events.jsonl' does not exist"),
        (["--once"], "--once needs --input"),
        (["--input", "kafka://nohost", "--once"], "'kafka://nohost' is not a Kafka URL"),
        (["--input", ".", "--decisions-topic", "dec"], "an output topic given by name needs a Kafka input"),
    ],
)
def test_bad_start_up_gives_one_line_and_exit_2(args, message, capsys):
    assert main(["run", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pidquota: error: ") and message in err
    assert len(err.splitlines()) == 1


def test_bad_quota_value_names_the_entity(tmp_path, capsys):
    q = tmp_path / "q.json"
    q.write_text(json.dumps({"users": {"User:x": {"producer_ids_rate": -3}}}))
    assert main(["run", "--quotas", str(q), "--input", str(tmp_path)]) == 2
    assert "producer_ids_rate for 'User:x' must be a positive number, got -3" in capsys.readouterr().err


def test_missing_java_is_a_clear_error(tmp_path):
    (tmp_path / "e.jsonl").write_text("{}\n")
    r = run_cli("run", "--input", str(tmp_path), "--once", env={"JAVA_HOME": "/nonexistent-jdk"})
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "pidquota: error: JAVA_HOME='/nonexistent-jdk' has no bin/java; point it at a JDK 17 or unset it"
    )


def test_first_line_of_a_wrapped_python_error():
    text = (
        "org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown "
        "from the Python worker: Traceback (most recent call last):\n  File x\n"
        "conf.errors.CorruptStateError: quota state has magic b'ZZZ', expected b'PQS'\n"
        "\tat org.apache.spark.Foo(Foo.scala:1)\n"
    )
    assert (
        _first_line(RuntimeError(text))
        == "conf.errors.CorruptStateError: quota state has magic b'ZZZ', expected b'PQS'"
    )


def test_run_once_round_trip_through_the_cli(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text(
        "\n".join(
            json.dumps({"timestamp": i * 1000, "principal": "User:crash-loop", "producer_id": i})
            for i in range(70)
        )
        + "\nnot json\n"
    )
    out = tmp_path / "out"
    r = run_cli("run", "--input", str(events), "--output", str(out), "--once")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "wrote 70 decisions, 1 metric rows, 1 dead letters" in r.stdout
    decisions = [
        json.loads(x) for f in (out / "decisions").glob("*.jsonl") for x in f.read_text().splitlines()
    ]
    assert (
        sum(d["verdict"] == "ADMIT" for d in decisions) == 61
    )  # quota 60/h from conf/quotas.json, +1 refill
    assert (out / "_checkpoint" / "commits").is_dir()
