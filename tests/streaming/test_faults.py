"""Crashes and stops mid-run (issue 9, items 5, 6 and 8), through the real CLI.

A long file-input run (24 time-ordered files written in one go, so their
modification times tie, one file per micro-batch, Redis quotas with
publishing on) is interrupted several times at random points: SIGKILL of the
whole process group (driver, JVM and Python workers, as an OOM kill or a lost
node would), and once a Ctrl-C. Each time it is restarted. The end state must
equal an uninterrupted run's: the same decisions, metrics and dead letters,
none lost or duplicated, and the same throttle state published in Redis.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from pidquota.streaming.outputs.reader import read_output

FILES = 24
QUOTAS = {"<default>": 30, "User:vip": 500}


def _write_input(folder: Path) -> None:
    """24 files of 5 minutes of event time each, with PID churn, a few bad lines, equal mtimes."""
    rng = random.Random(5)
    folder.mkdir(parents=True)
    t0 = 1_700_000_000_000
    for i in range(FILES):
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
        "--quota-store",
        redis_url,
        "--set",
        f"pidquota.redis.prefix={prefix}",
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
    if sig == signal.SIGKILL:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # nothing of the group may linger
    return proc.returncode, err.decode()


def _published(client, prefix: str) -> dict:
    """Every per-user hash pidquota published, less the batch that wrote it (see below)."""
    out = {}
    for key in client.scan_iter(match=f"{{{prefix}}}:users:*"):
        fields = client.hgetall(key)
        fields.pop(b"batch_id", None)
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


@pytest.mark.e2e
def test_kill_9_and_ctrl_c_mid_run_then_restart_equals_an_uninterrupted_run(tmp_path, redis_server):
    import redis

    from pidquota.store.quotas import RedisQuotaStore

    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    for prefix in ("straight", "crashed"):
        store = RedisQuotaStore(client, prefix)
        for entity, rate in QUOTAS.items():
            store.alter(entity, {"producer_ids_rate": rate})
    inp = tmp_path / "in"
    _write_input(inp)
    env_root = Path(__file__).resolve().parents[2]

    straight = tmp_path / "straight"
    done = subprocess.run(
        _command(inp, straight, redis_server, "straight"), capture_output=True, cwd=env_root, timeout=600
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert _batches(straight) == FILES  # one file per batch, none skipped

    crashed = tmp_path / "crashed"
    cmd = _command(inp, crashed, redis_server, "crashed")
    rng = random.Random(936)
    landed = 0
    for sig in (signal.SIGKILL, signal.SIGINT, signal.SIGKILL, signal.SIGKILL):
        rc, err = _interrupt(cmd, crashed, sig, rng.randint(1, 4), rng.uniform(0, 1.5))
        landed += 0 < _batches(crashed) < FILES
        if sig == signal.SIGINT:  # a Ctrl-C: one line, no traceback, exit 130 (or 0 if it had finished)
            assert rc in (0, 130), err[-3000:]
            assert "Traceback" not in err and "py4j" not in err, err[-3000:]
            if rc == 130:
                ours = [line for line in err.splitlines() if line.startswith("pidquota:")]
                assert ours == ["pidquota: stopping after the batch in flight (Ctrl-C; again to stop now)"], (
                    err
                )
        if _batches(crashed) >= FILES:
            break
    assert landed >= 2  # the interruptions fell mid-run, not before the first or after the last batch
    done = subprocess.run(cmd, capture_output=True, cwd=env_root, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    want, got = _frames(straight), _frames(crashed)
    for name in want:
        pd.testing.assert_frame_equal(got[name], want[name], check_dtype=False, obj=name)
    assert len(want["dead-letters"]) == FILES
    assert (want["decisions"].verdict == "THROTTLE").any()
    assert _published(client, "crashed") == _published(client, "straight") != {}


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
