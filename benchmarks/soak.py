"""A soak: the enforcer for a chosen wall time, with what it holds sampled as it goes.

    python benchmarks/soak.py [--minutes 60] [--every 30] [--speed 3600] [--folder RATE] [--keep DIR]

Runs ``pidquota run`` as a user does, in its own process: the embedded demo at
``--speed`` times event time (3,600x: an hour of traffic each second, a week in
under three minutes), or with ``--folder RATE`` a folder that this script fills
with realistic events at RATE events/s, a file a second (the folder grows with the run, as
a folder fed by a log shipper does unless it is cleaned). Every ``--every``
seconds it samples:

- ``checkpoint``: bytes under the checkpoint folder (Spark's offsets, commits and
  state store);
- ``output``: bytes of the decision, metrics and dead-letter files;
- ``rss``: the resident memory of the run's whole process tree (driver JVM, Python
  driver and Python workers), from ``/proc``;
- ``fds``: open file descriptors of that tree (the target: its peak no higher in the last
  third than in the middle one);
- ``series``: lines of the run's Prometheus ``/metrics`` page (the exporter's labels);
- ``batch``: the median duration of the micro-batches finished since the last
  sample, from the checkpoint's offset and commit files.

At the end it compares the middle third of the run with the last third, against
the targets of issue 24: checkpoint growth <= 25% (its peak), RSS growth <= 15%
(median), median batch time <= 1.5x, open file descriptors flat (max). Asserts
nothing; prints every sample as a table row and the verdicts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* from the root

TARGETS = {  # measure -> (how a third is summarised, allowed last/middle ratio)
    "checkpoint": (max, 1.25),
    "rss": (statistics.median, 1.15),
    "batch": (statistics.median, 1.5),
    "fds": (max, 1.0),
}


@dataclass
class Sample:
    """One sample of the run: sizes in bytes, memory in bytes, batch time in seconds."""

    wall_s: float
    checkpoint: int
    output: int
    rss: int
    fds: int
    series: int
    batches: int
    batch: float  # median seconds of the batches finished since the last sample (nan: none)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(root: int) -> list[int]:
    """``root`` and every process below it, from ``/proc/*/stat``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rpartition(")")[2].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def rss_and_fds(pids: list[int]) -> tuple[int, int]:
    rss = fds = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1]) * 1024
            fds += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:  # gone meanwhile
            continue
    return rss, fds


def size(folder: Path, skip: str | None = None) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        if skip in dirnames:
            dirnames.remove(skip)
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


def batch_times(checkpoint: Path, since: int) -> tuple[int, list[float]]:
    """The last committed batch id, and the duration of each batch after ``since``:
    its commit file's time minus its offsets file's (written when the batch is planned)."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")] if checkpoint.exists() else []
    last = max(commits, default=-1)
    out = []
    for b in range(since + 1, last + 1):
        try:
            out.append(
                (checkpoint / "commits" / str(b)).stat().st_mtime
                - (checkpoint / "offsets" / str(b)).stat().st_mtime
            )
        except OSError:  # purged by Spark meanwhile
            continue
    return last, out


def series(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return sum(1 for line in r.read().decode().splitlines() if line and not line.startswith("#"))
    except OSError:
        return -1


def feeder(folder: Path, rate: float, stop: threading.Event) -> None:
    """A file of realistic events a second (1% new PIDs), stamped with the wall clock."""
    import numpy as np

    from benchmarks.latency import realistic_tick

    rng, fresh_pid, k = np.random.default_rng(11), 50_000_000, 0
    while not stop.is_set():
        tick = time.monotonic()
        body, fresh_pid = realistic_tick(rng, max(1, round(rate)), fresh_pid)
        tmp = folder / f".part-{k:08d}.jsonl.tmp"
        tmp.write_text(body)
        os.replace(tmp, folder / f"part-{k:08d}.jsonl")
        k += 1
        stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))


def command(args, out: Path, port: int, folder: Path | None) -> list[str]:
    cmd = [sys.executable, "-m", "pidquota", "run", "--output", str(out), "--prometheus-port", str(port)]
    cmd += ["--duration", f"{round(args.minutes * 60)}s"]
    if folder is None:
        cmd += ["--speed", str(args.speed)]
    else:
        cmd += ["--input", str(folder), "--follow"]
    return cmd + [item for kv in args.set for item in ("--set", kv)]


def third(samples: list[Sample], which: int, measure: str) -> float | None:
    n = len(samples)
    part = samples[which * n // 3 : (which + 1) * n // 3]
    values = [getattr(s, measure) for s in part if getattr(s, measure) == getattr(s, measure)]  # no nan
    how = TARGETS[measure][0]
    return how(values) if values else None


def report(samples: list[Sample]) -> None:
    print("\nmiddle third -> last third (issue 24's targets):")
    for measure, (how, limit) in TARGETS.items():
        mid, last = third(samples, 1, measure), third(samples, 2, measure)
        if not mid or last is None:
            print(f"  {measure:10s} not enough samples")
            continue
        ratio = last / mid
        print(
            f"  {measure:10s} {how.__name__:6s} {mid:>14,.2f} -> {last:>14,.2f}  x{ratio:.3f} "
            f"(target <= x{limit:g}: {'met' if ratio <= limit else 'MISSED'})"
        )
    first, end = samples[0], samples[-1]
    hours = (end.wall_s - first.wall_s) / 3600
    if hours > 0:
        print(f"  output grew {(end.output - first.output) / 2**20 / hours:,.1f} MiB per wall hour")


def row(s: Sample) -> str:
    return (
        f"{s.wall_s:8.0f} {s.checkpoint / 2**20:10.2f} {s.output / 2**20:9.1f} {s.rss / 2**30:8.3f} "
        f"{s.fds:5d} {s.series:7d} {s.batches:8d} {s.batch:8.3f}"
    )


def soak(args) -> list[Sample]:
    work = Path(args.keep or tempfile.mkdtemp(prefix="pidquota-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    out, port = work / "out", free_port()
    folder, stop = None, threading.Event()
    if args.folder:
        folder = work / "in"
        folder.mkdir(parents=True, exist_ok=True)
        threading.Thread(target=feeder, args=(folder, args.folder, stop), daemon=True).start()
    cmd = command(args, out, port, folder)
    print("running:", " ".join(cmd), flush=True)
    log = open(work / "run.log", "w")  # noqa: SIM115 (open for the run's life)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    samples, last_batch, start = [], -1, time.monotonic()
    print(
        f"{'wall s':>8} {'ckpt MiB':>10} {'out MiB':>9} {'rss GiB':>8} {'fds':>5} {'series':>7} {'batches':>8} {'batch s':>8}"
    )
    try:
        while proc.poll() is None:
            time.sleep(args.every)
            rss, fds = rss_and_fds(tree(proc.pid))
            last_batch, durations = batch_times(out / "_checkpoint", last_batch)
            s = Sample(
                time.monotonic() - start,
                size(out / "_checkpoint"),
                size(out, skip="_checkpoint"),
                rss,
                fds,
                series(port),
                last_batch + 1,
                statistics.median(durations) if durations else float("nan"),
            )
            if proc.poll() is None:
                samples.append(s)
                print(row(s), flush=True)
    finally:
        stop.set()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        print(f"run exit {proc.returncode}; its log: {work / 'run.log'}")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60, help="wall time of the run")
    ap.add_argument("--every", type=float, default=30, help="seconds between samples")
    ap.add_argument("--speed", type=float, default=3600, help="the demo's event time per wall time")
    ap.add_argument("--folder", type=float, default=0, help="read a folder fed at this many events/s instead")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to pidquota run")
    ap.add_argument("--keep", help="work in this folder and keep it (default: a temporary one, removed)")
    samples = soak(ap.parse_args())
    if len(samples) >= 6:
        report(samples)
    else:
        print("too few samples to compare thirds")


if __name__ == "__main__":
    main()
