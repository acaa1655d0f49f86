"""Crashes, kills and a full disk mid-run (issue 9, items 5, 6 and 8; issue 24), through the
real CLI.

Every run reads the same input: 12 time-ordered files written in one go, so their
modification times tie, one file per micro-batch, with PID churn and a few bad lines.
One uninterrupted run of it (``straight_run``, Redis quotas with publishing on) is the
oracle. A run that is interrupted, by SIGKILL of the whole process group (driver, JVM
and Python workers, as an OOM kill or a lost node would), a Ctrl-C, a killed Python
worker or a full disk, and then restarted must end equal to it: the same decisions,
metrics and dead letters, none lost or duplicated (and, after the kills, the same
throttle state published in Redis).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from pidquota.streaming.outputs.reader import read_output

FILES = 12
QUOTAS = {"<default>": 30, "User:vip": 500}


def _write_input(folder: Path, files: int = FILES) -> None:
    """``files`` files of 5 minutes of event time each, with PID churn, a few bad lines, equal mtimes."""
    rng = random.Random(5)
    folder.mkdir(parents=True)
    t0 = 1_700_000_000_000
    for i in range(files):
        lines = []
        for j in range(400):
            t = t0 + i * 300_000 + j * 750
            user = rng.choice(["User:crash", "User:steady", "User:vip", "User:batch"])
            pid = t // 7000 if user in ("User:crash", "User:batch") else rng.randrange(8)
            lines.append(json.dumps({"timestamp": t, "principal": user, "producer_id": int(pid)}))
        lines.insert(rng.randrange(len(lines)), '{"timestamp": "late", "principal": "User:x"}')
        (folder / f"part-{i:02d}.jsonl").write_text("\n".join(lines) + "\n")
    for f in folder.iterdir():
        os.utime(f, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))


def _command(inp: Path, out: Path, redis_url: str, prefix: str) -> list[str]:
    """A run over ``inp`` with :data:`QUOTAS` in Redis under ``prefix``, publishing there."""
    import redis

    from pidquota.store.quotas import RedisQuotaStore

    store = RedisQuotaStore(redis.Redis.from_url(redis_url), prefix)
    for entity, rate in QUOTAS.items():
        store.alter(entity, {"producer_ids_rate": rate})
    return [*_file_run(inp, out), "--quota-store", redis_url, "--set", f"pidquota.redis.prefix={prefix}"]


def _file_run(inp: Path, out: Path) -> list[str]:
    """``pidquota run --once`` over ``inp``, one file per micro-batch."""
    return [
        sys.executable,
        "-m",
        "pidquota",
        "run",
        "--input",
        str(inp),
        "--output",
        str(out),
        "--once",
        "--set",
        "pidquota.max.events.per.trigger=1",
    ]


def _batches(out: Path) -> int:
    return len(list((out / "metrics").glob("part-*.jsonl")))


def _interrupt(cmd: list[str], out: Path, sig: int, after_batches: int, delay_s: float) -> tuple[int, str]:
    """Start the run, wait for ``after_batches`` more batches and ``delay_s``, signal its group."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    target = _batches(out) + after_batches if out.exists() else after_batches
    deadline = time.monotonic() + 180
    while proc.poll() is None and _batches(out) < target and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(delay_s)
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=180)
    return proc.returncode, err.decode()


def _finish(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, cwd=Path(__file__).resolve().parents[2], timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-3000:]


def _published(client, prefix: str) -> dict:
    """Every per-user hash pidquota published, less the batch that wrote it (see below) and
    when (``published_ms``, wall-clock)."""
    out = {}
    for key in client.scan_iter(match=f"{{{prefix}}}:users:*"):
        fields = client.hgetall(key)
        fields.pop(b"batch_id", None)
        fields.pop(b"published_ms", None)
        out[key.decode().split(":users:", 1)[1]] = fields
    return out


def _frames(out: Path) -> dict[str, pd.DataFrame]:
    """The outputs, sorted, without ``batch_id``: a run stopped by Ctrl-C lets Spark run one
    batch with no data (to move the watermark on), which shifts the later batches' numbers,
    not their contents."""
    frames = {}
    for name in ("decisions", "metrics", "dead-letters"):
        frame = read_output(out, name).drop(columns="batch_id")
        assert not frame.duplicated().any(), name  # nothing written twice
        frames[name] = frame.sort_values(list(frame.columns)).reset_index(drop=True)
    return frames


@pytest.fixture(scope="module")
def straight_run(redis_server, tmp_path_factory) -> tuple[Path, Path]:
    """The oracle: one uninterrupted run over the input, quotas in Redis under the prefix
    ``straight``. Returns (input, output)."""
    tmp = tmp_path_factory.mktemp("straight")
    inp, out = tmp / "in", tmp / "out"
    _write_input(inp)
    _finish(_command(inp, out, redis_server, "straight"))
    assert _batches(out) == FILES  # one file per batch, none skipped
    return inp, out


def _assert_same_outputs(out: Path, straight: Path) -> None:
    want, got = _frames(straight), _frames(out)
    for name in want:
        pd.testing.assert_frame_equal(got[name], want[name], check_dtype=False, obj=name)


def _to_topic(kafka, topic: str, mode: str) -> list[str]:
    """The options of a run that also sends its decisions to ``topic``, in sink ``mode``."""
    return [
        "--decisions-topic",
        f"kafka://{kafka.bootstrap}/{topic}",
        "--set",
        f"pidquota.kafka.sink.mode={mode}",
    ]


@pytest.mark.e2e
def test_kills_and_ctrl_c_mid_run_then_restarts_equal_an_uninterrupted_run_once_each_in_kafka(
    tmp_path, redis_server, kafka, straight_run
):
    """Faults mid-run, each followed by a restart: Python workers killed until a task is lost
    (the run goes on: the task is retried) and then SIGKILL of the whole group, Spark's JVM
    alone killed (as the kernel's OOM killer would: the run ends in one line naming
    pidquota.spark.driver.memory, not py4j's traceback), a Ctrl-C, then a crash between a
    batch's Kafka commit and Spark's. The files, the Redis throttle state and the decisions topic (read
    committed, exactly once) all equal an uninterrupted run's, with nothing twice. Then at least
    once: the same run, its last commit lost again and resumed at least once, sends that batch
    to the topic a second time. (The JVM's kill was a test and a run of its own.)"""
    import redis

    inp, straight = straight_run
    crashed = tmp_path / "crashed"
    cmd = [*_command(inp, crashed, redis_server, "crashed"), *_to_topic(kafka, "faults", "exactly-once")]
    _lose_a_task_then_kill_9(cmd, crashed)
    landed = 0 < _batches(crashed) < FILES
    # then Spark's JVM dies under the restarted run, a batch after it resumed
    assert _batches(crashed) < FILES - 1, (
        f"{_batches(crashed)} of {FILES} batches: none left for the JVM's kill"
    )
    _kill_the_jvm(cmd, crashed)
    rng = random.Random(936)
    # then a Ctrl-C: one line, no traceback, exit 130
    rc, err = _interrupt(cmd, crashed, signal.SIGINT, rng.randint(1, 3), rng.uniform(0, 1.5))
    landed += 0 < _batches(crashed) < FILES
    assert rc == 130, err[-3000:]
    assert "Traceback" not in err and "py4j" not in err, err[-3000:]
    ours = [line for line in err.splitlines() if line.startswith("pidquota:")]
    assert ours == ["pidquota: stopping after the batch in flight (Ctrl-C; again to stop now)"], err
    assert landed >= 2  # the interruptions fell mid-run, not before the first or after the last batch
    _lose_last_commit(crashed)  # and a crash between a batch's Kafka commit and Spark's
    _finish(cmd)

    _assert_same_outputs(crashed, straight)
    want = _frames(straight)
    assert len(want["dead-letters"]) == FILES
    assert (want["decisions"].verdict == "THROTTLE").any()
    client = redis.Redis.from_url(redis_server)
    assert _published(client, "crashed") == _published(client, "straight") != {}
    decisions = _file_decisions(crashed)  # exactly once by batch name (just checked)
    assert _topic_decisions(kafka, "faults") == decisions

    replayed = _lose_last_commit(crashed)
    _finish([*_command(inp, crashed, redis_server, "crashed"), *_to_topic(kafka, "faults", "at-least-once")])
    got = _topic_decisions(kafka, "faults")
    assert len(got) == len(decisions) + replayed and replayed > 0  # the duplicates at least once allows
    assert sorted(set(got), key=repr) == decisions


def _lose_last_commit(out: Path) -> int:
    """A crash after the last batch with decisions reached Kafka and before Spark recorded
    it: the restart replays that batch. Returns its decision count."""
    decisions = read_output(out, "decisions")
    last = int(decisions["batch_id"].max())
    checkpoint = out / "_checkpoint"
    for log, first in (("commits", last), ("offsets", last + 1)):  # and the empty batches after it
        for path in (checkpoint / log).iterdir():
            batch = re.fullmatch(r"\.?(\d+)(?:\.crc)?", path.name)  # not the .tmp a kill left
            if batch and int(batch.group(1)) >= first:
                path.unlink()
    return int((decisions["batch_id"] == last).sum())


def _topic_decisions(kafka, topic: str) -> list[tuple]:
    from harness.kafka import read_committed

    rows = [json.loads(v) for v in read_committed(kafka, topic)]
    return sorted(
        (tuple(sorted((k, _plain(v)) for k, v in r.items() if k != "batch_id")) for r in rows), key=repr
    )


def _file_decisions(out: Path) -> list[tuple]:
    rows = read_output(out, "decisions").drop(columns="batch_id").to_dict("records")
    return sorted((tuple(sorted((k, _plain(v)) for k, v in r.items())) for r in rows), key=repr)


def _plain(value):
    """A value as both outputs give it: pandas' NA as None, numpy numbers as Python's, and floats
    to 10 decimals (the files' JSON writes 10; the topic's writes every digit)."""
    if value is None or (isinstance(value, float) and value != value) or value is pd.NA:
        return None
    value = value.item() if hasattr(value, "item") else value
    return round(value, 10) if isinstance(value, float) else value


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def _cpu(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _busy_python_worker(root: int) -> int | None:
    """A PySpark Python worker of ``root``'s process tree (a child of its ``pyspark.daemon``)
    that is using CPU right now: one in the middle of a task."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                parents[int(entry.name)] = _parent(int(entry.name))

    def under_root(pid: int) -> bool:
        while pid in parents and pid != root:
            pid = parents[pid]
        return pid == root

    daemons = set()
    for pid in parents:
        with contextlib.suppress(OSError):
            # the task workers' daemon (pyspark.worker), not the data source planners' daemons
            if b"pyspark.daemon\x00pyspark.worker\x00" in Path(
                f"/proc/{pid}/cmdline"
            ).read_bytes() and under_root(pid):
                daemons.add(pid)
    before = {}
    for pid in (p for p, parent in parents.items() if parent in daemons):
        with contextlib.suppress(OSError):
            before[pid] = _cpu(pid)
    time.sleep(0.02)
    for pid, was in before.items():
        with contextlib.suppress(OSError):
            if _cpu(pid) > was:
                return pid
    return None


def _lose_a_task_then_kill_9(cmd: list[str], out: Path, max_kills: int = 30) -> None:
    """Start the run; SIGKILL busy task workers of it, one at a time and half a second apart,
    the JVM staying up, until Spark's log says a task was lost (a kill landed mid-task). The
    batch must then commit (the task was retried: a local master's single attempt would fail
    the query). Then SIGKILL the whole group."""
    import threading

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(x.decode(errors="replace") for x in proc.stderr))
    reader.start()
    lost = lambda: any("Lost task" in x for x in lines)  # noqa: E731
    kills, last = 0, 0.0
    try:
        while proc.poll() is None and kills < max_kills and not lost():
            if _batches(out) >= 1 and time.monotonic() - last > 0.5:
                victim = _busy_python_worker(proc.pid)
                if victim is not None:
                    os.kill(victim, signal.SIGKILL)  # the JVM and the other workers stay up
                    kills, last = kills + 1, time.monotonic()
            time.sleep(0.03)
        assert lost(), "no kill landed mid-task:\n" + "".join(lines[-20:])
        # the batch in flight (its id: the batches written so far) must commit: its outputs,
        # with the retried task's, are then final, and the end compares them with the oracle's
        committed, deadline = out / "_checkpoint" / "commits" / str(_batches(out)), time.monotonic() + 180
        while proc.poll() is None and not committed.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        went_on = committed.exists() or proc.poll() == 0
        assert went_on, f"the run did not go on after a lost task (exit {proc.poll()}):\n" + "".join(
            lines[-40:]
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=180)
        reader.join(timeout=60)


@pytest.mark.e2e
def test_a_full_output_disk_stops_the_run_in_one_line_and_it_resumes_once_there_is_room(
    tmp_path, redis_server, straight_run
):
    from harness.disk import SmallDisk

    inp, straight = straight_run
    disk = SmallDisk(tmp_path / "disk", "600k")
    try:
        out = disk.folder / "out"
        cmd = _command(inp, out, redis_server, "disk")
        full = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert full.returncode != 0
        ours = [line for line in full.stderr.splitlines() if line.startswith("pidquota:")]
        assert len(ours) == 1, full.stderr[-3000:]
        assert ours[0].startswith(f"pidquota: error: the disk is full under {disk.folder}"), ours
        assert "run the same command again" in ours[0]
        assert "Traceback" not in full.stderr and "Exception" not in full.stderr, full.stderr[-3000:]
        assert _batches(out) < FILES  # it stopped part-way
        disk.grow("64m")
        _finish(cmd)
        _assert_same_outputs(out, straight)
    finally:
        disk.close()


def _spark_jvm(root: int) -> int | None:
    """The pid of the Spark JVM (``SparkSubmit``) in ``root``'s process tree, if it is up."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            if b"org.apache.spark.deploy.SparkSubmit" not in (entry / "cmdline").read_bytes():
                continue
            pid = int(entry.name)
            while pid > 1 and pid != root:
                pid = _parent(pid)
            if pid == root:
                return int(entry.name)
    return None


def _kill_the_jvm(cmd: list[str], out: Path) -> None:
    """Spark's JVM killed under a run, a batch after it resumed (as the kernel's OOM killer
    would): the run ends with one line that says so and names pidquota.spark.driver.memory,
    not py4j's traceback; the restart after it must lose nothing."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        target, deadline = _batches(out) + 1, time.monotonic() + 180
        while proc.poll() is None and _batches(out) < target and time.monotonic() < deadline:
            time.sleep(0.05)
        jvm = _spark_jvm(proc.pid)
        assert proc.poll() is None and jvm is not None, "the run ended before its JVM could be killed"
        os.kill(jvm, signal.SIGKILL)
        _, err = proc.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    err = err.decode()
    assert proc.returncode == 2, err[-3000:]
    ours = [line for line in err.splitlines() if line.startswith("pidquota:")]
    assert len(ours) == 1, err[-3000:]
    assert ours[0].startswith(
        "pidquota: error: Spark's JVM died or ran out of memory during the run (it was killed by signal 9)"
    )
    assert "a bigger heap than its 1g, e.g. --set pidquota.spark.driver.memory=4g" in ours[0]
    assert "Traceback" not in err and "Py4J" not in err, err[-3000:]


@pytest.mark.parametrize("name", ["_under.jsonl", "ev[1].jsonl", ".hidden.jsonl"])
def test_a_named_file_is_read_whatever_its_name(name, make_enforcer, tmp_path):
    from pidquota.streaming import query as q

    path = tmp_path / name
    path.write_text(
        "\n".join(json.dumps({"timestamp": i, "principal": "User:n", "producer_id": i}) for i in range(100))
    )
    runner = make_enforcer(tmp_path / "run", {"<default>": 1000})
    out = runner._run(q.file_source(runner.spark, str(path), 0, str(runner.out / "_ck")))
    assert len(out["decisions"]) == 100
