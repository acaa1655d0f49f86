"""Follow mode under crashes, through the real CLI: a broker's request log grows (lines
written in pieces, cut mid-line) and rolls twice while ``pidquota run`` follows it and is
killed with SIGKILL three times. Restarted, then drained with ``--once``, it has decided
every granted init exactly once, as one uninterrupted ``--once`` run over the final files."""

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pidquota.streaming.outputs.reader import read_output
from pidquota.traffic import request_log as rl

T0 = 1_767_225_600_000
CHUNKS = 12
ROLL_AFTER = (3, 8)  # chunks after which the live file is rolled
ROOT = Path(__file__).resolve().parents[2]


def _chunks() -> list[bytes]:
    """CHUNKS pieces of a request log: crash loops, steady producers, noise, time-ordered."""
    rng = random.Random(21)
    out = []
    for c in range(CHUNKS):
        lines = []
        for i in range(60):
            ts = T0 + (c * 60 + i) * 1_000
            user = rng.choice(["User:crash", "User:crash", "User:steady", "User:batch"])
            pid = 5_000 + c * 60 + i if user != "User:steady" else rng.randrange(4)
            req, resp = rl.init_producer_id(4, None, 0, pid, 0)
            lines.append(rl.request_line(ts, rl.INIT_PRODUCER_ID, 4, req, resp, user, "app", i))
            req, resp = rl.fetch(1, "orders", 0, i)
            lines.append(rl.request_line(ts, rl.FETCH, 13, req, resp))
        out.append(("\n".join(lines) + "\n").encode())
    return out


def _append(live: Path, data: bytes) -> None:
    """Append a chunk in two writes, cut mid-line, as a busy broker's log is caught."""
    cut = len(data) // 2 + 7
    with live.open("ab") as f:
        f.write(data[:cut])
        f.flush()
        time.sleep(0.3)
        f.write(data[cut:])


def _command(inp: Path, out: Path, quotas: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pidquota",
        "run",
        "--input",
        str(inp),
        "--input-format",
        "kafka-request-log",
        "--output",
        str(out),
        "--quotas",
        str(quotas),
        "--set",
        "pidquota.trigger.interval.ms=300",
        *extra,
    ]


def _batches(out: Path) -> int:
    return len(list((out / "skipped").glob("part-*.jsonl"))) if out.exists() else 0


def _wait_for(out: Path, batches: int, proc) -> None:
    deadline = time.monotonic() + 120
    while proc.poll() is None and _batches(out) < batches and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None and _batches(out) >= batches, proc.stderr.read().decode()[-2000:]


def _decisions(out: Path) -> list[tuple]:
    d = read_output(out, "decisions")
    return sorted(map(tuple, d[["principal", "producer_id", "timestamp", "verdict"]].itertuples(index=False)))


@pytest.mark.e2e
def test_kill_9_while_the_log_grows_and_rolls_loses_nothing_and_repeats_nothing(tmp_path, make_enforcer):
    quotas = {"User:crash": 40, "<default>": 500}
    straight = make_enforcer(tmp_path / "straight", quotas, **{"pidquota.input.format": "kafka-request-log"})
    inp = straight.input
    folder = inp / "broker-1"
    folder.mkdir(parents=True)
    (tmp_path / "quotas.json").write_text(
        json.dumps({"users": {k: {"producer_ids_rate": v} for k, v in quotas.items()}})
    )
    cmd = _command(inp, tmp_path / "crashed", tmp_path / "quotas.json")
    chunks, rng = iter(enumerate(_chunks())), random.Random(9)
    live = folder / "kafka-request.log"

    def write_next() -> None:
        k, data = next(chunks)
        _append(live, data)
        if k + 1 in ROLL_AFTER:  # log4j rolls by renaming; the next write starts a new file
            live.rename(folder / f"kafka-request.log.2026-01-01-{k:02d}")

    for _ in range(2):  # each round: start, a batch read, more lines coming, SIGKILL
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, cwd=ROOT
        )
        try:
            write_next()
            _wait_for(tmp_path / "crashed", _batches(tmp_path / "crashed") + 1, proc)
            write_next()
            time.sleep(rng.uniform(0, 0.6))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
    for _ in range(CHUNKS - 4):
        write_next()
    done = subprocess.run([*cmd, "--once"], capture_output=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    assert sorted(p.name for p in folder.iterdir()) == [
        "kafka-request.log",
        "kafka-request.log.2026-01-01-02",
        "kafka-request.log.2026-01-01-07",
    ]
    straight._run(straight._files(0))
    expected = _decisions(straight.out)
    assert len(expected) == len({(p, pid) for p, pid, _, _ in expected}) > 400
    assert any(v == "THROTTLE" for *_, v in expected)
    assert _decisions(tmp_path / "crashed") == expected  # every init once: none lost, none twice
    assert read_output(tmp_path / "crashed", "dead-letters").empty
