"""The actuator in use, on the session's broker: ``pidquota actuator status|lift``, and a
``pidquota run`` that acts on its crash loop, is killed with -9 while it does, and whose
restart reconciles the journal and, at its end, puts the operator's quota back exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from harness.acting import new_user
from harness.cli import run_cli

from pidquota.actuate.controls import QuotaKey
from pidquota.actuate.runner import BatchActuator, cluster_options
from pidquota.conf.loader import load
from pidquota.streaming.outputs.reader import read_output

pytestmark = pytest.mark.kafka


def _settings(kafka, topic: str) -> list[str]:
    return [
        "--set",
        f"pidquota.actuator.bootstrap={kafka.bootstrap}",
        "--set",
        f"pidquota.actuator.journal.topic={topic}",
    ]


def test_status_shows_what_is_held_and_lift_puts_the_operators_value_back(cluster, kafka):
    controls, journal, _ = cluster
    user = new_user()
    key = QuotaKey("user", user, "request_percentage")
    controls.write(key, 200.0)  # the operator's own
    config = load(None, {"pidquota.actuator": "on", "pidquota.actuator.journal.topic": journal.topic})
    act = BatchActuator(config, cluster_options(config, kafka.bootstrap))
    try:
        act.start()
        row = {"principal": f"User:{user}", "timestamp": 1, "quota": 10.0, "tokens": 0.0, "throttled": 4}
        [applied] = act([row])
        assert applied.action == "apply" and controls.read(key) == 1.0
    finally:
        act.close()

    shown = run_cli("actuator", "status", *_settings(kafka, journal.topic))
    assert shown.returncode == 0, shown.stderr
    line, who = shown.stdout.splitlines()
    assert line.startswith(
        f"User:{user}: quota user={user} request_percentage = 1 (as set; the operator's was 200), for "
    )
    # the run that set it (this test's process, its actuator closed without lifting) is no pidquota run
    assert who.startswith(f"pidquota: the run that set them (pid {os.getpid()} on this host, since ")
    assert who.endswith(
        "is not running: nothing undoes them until a run starts on this journal, or `pidquota actuator lift`"
    )

    lifted = run_cli("actuator", "lift", *_settings(kafka, journal.topic))
    assert lifted.returncode == 0, lifted.stderr
    assert lifted.stdout.splitlines() == [
        f"undo quota user={user} request_percentage: 1 -> 200 for User:{user}",
        f"pidquota: lifted 1 control(s) on {kafka.bootstrap}",
    ]
    assert controls.read(key) == 200.0 and journal.load() == {}
    again = run_cli("actuator", "status", *_settings(kafka, journal.topic))
    assert again.stdout.startswith(f"pidquota: the actuator holds nothing on {kafka.bootstrap}")


def test_without_a_cluster_the_command_says_how_to_name_one():
    done = run_cli("actuator", "status")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "pidquota: error: the actuator needs the Kafka cluster it acts on, and none is given: give "
        "--bootstrap HOST:PORT (or set pidquota.actuator.bootstrap)"
    ]


def _flood(folder, user: str, files: int = 6) -> None:
    """``files`` files of a crash loop (a new PID every event) beside a steady user."""
    folder.mkdir()
    t0 = 1_700_000_000_000
    for i in range(files):
        lines = []
        for j in range(60):
            t = t0 + i * 60_000 + j * 1000
            lines.append(
                json.dumps({"timestamp": t, "principal": f"User:{user}", "producer_id": i * 100 + j})
            )
            lines.append(json.dumps({"timestamp": t, "principal": "User:steady", "producer_id": 7}))
        (folder / f"part-{i:02d}.jsonl").write_text("\n".join(lines) + "\n")


def _actions(out) -> list[tuple[str, str]]:
    frame = read_output(out, "actions")
    return list(zip(frame.action, frame.principal, strict=True)) if len(frame) else []


@pytest.mark.e2e
def test_a_run_acts_a_kill_9_leaves_it_held_and_the_restart_keeps_then_lifts_it_exactly(
    cluster, kafka, tmp_path
):
    controls, journal, _ = cluster
    user = new_user()
    key = QuotaKey("user", user, "request_percentage")
    controls.write(key, 200.0)  # the operator's own, put back exactly at the end
    inp, out = tmp_path / "in", tmp_path / "out"
    _flood(inp, user)
    quotas = tmp_path / "quotas.json"
    quotas.write_text(json.dumps({"users": {f"User:{user}": {"producer_ids_rate": 10}}}))
    cmd = [
        sys.executable, "-m", "pidquota", "run", "--input", str(inp), "--output", str(out), "--once",
        "--quotas", str(quotas), "--set", "pidquota.max.events.per.trigger=1",
        "--set", "pidquota.actuator=on", *_settings(kafka, journal.topic),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 240
    while (
        proc.poll() is None and ("apply", f"User:{user}") not in _actions(out) and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert ("apply", f"User:{user}") in _actions(out), err.decode()[-3000:]
    assert controls.read(key) == 1.0  # held after the kill: nothing lifted it
    assert [e.principal for e in journal.load().values()] == [f"User:{user}"]
    shown = run_cli("actuator", "status", *_settings(kafka, journal.topic))
    assert shown.stdout.splitlines()[-1].startswith(f"pidquota: the run that set them (pid {proc.pid} on ")
    assert "is not running: nothing undoes them until a run starts" in shown.stdout

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "pidquota: actuator request-quota+connection-rate (request_percentage 1; no connection rate: the "
        f"clients' addresses come only from plugin-inits or kafka-request-log) on {kafka.bootstrap}"
    ) in done.stdout
    from pidquota.streaming.outputs.reader import output_files

    first_run, second_run = (
        [json.loads(line) for line in f.read_text().splitlines()] for f in output_files(out, "actions")
    )
    assert first_run[0]["action"] == "apply" and first_run[0]["before"] == 200.0
    restart, *_, end = second_run
    assert (restart["action"], restart["batch_id"], restart["value"]) == ("keep", None, 1.0)  # reconciled
    assert (end["action"], end["value"]) == ("undo", 200.0)  # the run's end
    assert "User:steady" not in {r["principal"] for r in first_run + second_run}
    assert "pidquota: actuator: " in done.stdout and "every action in" in done.stdout
    assert controls.read(key) == 200.0 and journal.load() == {}


def _stopped_as_gnu_timeout_does(proc) -> tuple[int, str]:
    """SIGTERM to the run, then to its whole process group (Spark's JVM included), as GNU
    timeout and some service managers do: one stop, arriving twice."""
    os.kill(proc.pid, signal.SIGTERM)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode()


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["on", "dry-run"])
def test_a_stop_sent_to_the_process_group_lifts_what_the_run_holds(cluster, kafka, tmp_path, mode):
    """Issue 42 §3: the double SIGTERM of GNU timeout stopped the run at once, left the controls on
    the cluster without a word, and a dry run said Spark's JVM had died (code 143)."""
    controls, journal, _ = cluster
    user = new_user()
    key = QuotaKey("user", user, "request_percentage")
    controls.write(key, 200.0)
    inp, out = tmp_path / "in", tmp_path / "out"
    _flood(inp, user, files=30)
    quotas = tmp_path / "quotas.json"
    quotas.write_text(json.dumps({"users": {f"User:{user}": {"producer_ids_rate": 10}}}))
    cmd = [
        sys.executable, "-m", "pidquota", "run", "--input", str(inp), "--output", str(out),
        "--quotas", str(quotas), "--set", "pidquota.max.events.per.trigger=1",
        "--set", f"pidquota.actuator={mode}", *_settings(kafka, journal.topic),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 240
    while (
        proc.poll() is None and ("apply", f"User:{user}") not in _actions(out) and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
    code, err = _stopped_as_gnu_timeout_does(proc)
    assert code == 143, err[-3000:]
    assert "stopped now" not in err and "died" not in err and "query failed" not in err, err[-3000:]
    assert controls.read(key) == 200.0 and journal.load() == {}  # lifted: the operator's value back
    if mode == "on":
        assert ("undo", f"User:{user}") in _actions(out)


def test_a_dry_run_with_a_cluster_shows_the_operators_values_and_changes_nothing(cluster, kafka):
    """Issue 42 §3: a dry run's rows said "before": null although the operator had 200."""
    controls, journal, _ = cluster
    loose, strict = new_user(), new_user()
    controls.write(QuotaKey("user", loose, "request_percentage"), 200.0)
    controls.write(QuotaKey("user", strict, "request_percentage"), 0.5)
    config = load(None, {"pidquota.actuator": "dry-run", "pidquota.actuator.mechanism": "request-quota"})
    act = BatchActuator(config, None, peek=cluster_options(config, kafka.bootstrap))
    try:
        rows = act([_throttled(loose), _throttled(strict)])
    finally:
        act.close()
    shown = {r.principal: (r.action, r.before, r.value, r.dry_run) for r in rows}
    assert shown == {
        f"User:{loose}": ("apply", 200.0, 1.0, True),
        f"User:{strict}": ("keep", 0.5, 0.5, True),
    }
    assert controls.read(QuotaKey("user", loose, "request_percentage")) == 200.0  # nothing changed


def _throttled(user: str) -> dict:
    return {"principal": f"User:{user}", "timestamp": 1, "quota": 10.0, "tokens": 0.0, "throttled": 4}
