"""Cold start from the log: what ``--replay-until`` saves after a lost checkpoint.

    python benchmarks/cold_start.py [--hours 3] [--lost-at 2.5] [--fleet 300] [--quota 100]

Generates ``--hours`` of traffic: a fleet of ``--fleet`` long-lived producers
under ``producer_ids_rate = --quota``, plus a crash loop and a new producer
per batch (quota 60). Then three ``pidquota run --once`` on files, each in its
own process, exactly as an operator would run them:

- A: uninterrupted, on all of it;
- B: the checkpoint lost at ``--lost-at`` hours; restarted with
  ``--replay-until`` that moment on the events from W + W/layer.count before it
  (what a Kafka input on a new checkpoint seeks to);
- C: restarted naively at that moment, on the events from it.

Prints, from the moment of the loss on: how many of A's and B's verdicts agree,
how many fleet PIDs each run throttles, and each run's time. Asserts nothing
(``tests/streaming/test_replay.py`` holds the same proof on Kafka).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from pidquota.streaming.outputs.reader import read_output
from pidquota.traffic.generator import TrafficGenerator
from pidquota.traffic.mixes import validate_mix

W = 3_600_000
SPAN = W + W // 4


def write(folder: Path, name: str, times, lines, since: int) -> Path:
    path = folder / f"{name}.jsonl"
    with path.open("w") as f:
        for t, line in zip(times, lines, strict=True):
            if t >= since:
                f.write(line + "\n")
    return path


def run(folder: Path, name: str, events: Path, quotas: Path, *extra: str) -> tuple[pd.DataFrame, float]:
    out = folder / f"out-{name}"
    began = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pidquota",
            "run",
            "--input",
            str(events),
            "--output",
            str(out),
            "--once",
            "--quotas",
            str(quotas),
            *extra,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return read_output(out, "decisions"), time.monotonic() - began


def agreement(a: pd.DataFrame, b: pd.DataFrame, since: int) -> tuple[int, int]:
    key = ["principal", "producer_id", "timestamp"]
    a, b = (d[d.timestamp >= since][[*key, "verdict"]] for d in (a, b))
    both = a.merge(b, on=key, how="outer", suffixes=("_a", "_b"))
    return int((both.verdict_a == both.verdict_b).sum()), len(both)


def fleet_throttled(d: pd.DataFrame, since: int) -> int:
    d = d[(d.principal == "User:fleet") & (d.timestamp >= since) & (d.verdict == "THROTTLE")]
    return d.producer_id.nunique()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=3.0)
    ap.add_argument("--lost-at", type=float, default=2.5)
    ap.add_argument("--fleet", type=int, default=300)
    ap.add_argument("--quota", type=int, default=100)
    args = ap.parse_args()
    mix = {
        "User:fleet": {"behaviour": "steady", "producers": args.fleet},
        "User:crash-loop": {"behaviour": "crash-loop"},
        "User:per-batch": {"behaviour": "per-batch"},
    }
    gen = TrafficGenerator(seed=5, rate=args.fleet / 60, mix=validate_mix(mix, "cold-start mix"))
    times, lines, _ = gen.keyed_events(gen.start_ms + int(args.hours * W))
    order = sorted(range(len(times)), key=lambda i: times[i])
    times, lines = [int(times[i]) for i in order], [lines[i] for i in order]
    lost = gen.start_ms + int(args.lost_at * W)
    quotas = {"<default>": 200, "User:fleet": args.quota, "User:crash-loop": 60, "User:per-batch": 60}
    with tempfile.TemporaryDirectory(prefix="pidquota-cold-") as tmp:
        folder = Path(tmp)
        qfile = folder / "quotas.json"
        qfile.write_text(json.dumps({"users": {u: {"producer_ids_rate": r} for u, r in quotas.items()}}))
        a, ta = run(folder, "a", write(folder, "all", times, lines, 0), qfile)
        b, tb = run(
            folder, "b", write(folder, "tail", times, lines, lost - SPAN), qfile, "--replay-until", str(lost)
        )
        c, tc = run(folder, "c", write(folder, "naive", times, lines, lost), qfile)
    same, total = agreement(a, b, lost)
    print(
        f"{len(lines):,} events over {args.hours:g} h; fleet of {args.fleet} at quota {args.quota}; "
        f"checkpoint lost at {args.lost_at:g} h"
    )
    print(f"{'run':<28} {'time':>7} {'fleet PIDs throttled after the loss':>36}")
    print(f"{'A uninterrupted':<28} {ta:>6.1f}s {fleet_throttled(a, lost):>36}")
    print(f"{'B --replay-until the loss':<28} {tb:>6.1f}s {fleet_throttled(b, lost):>36}")
    print(f"{'C naive restart':<28} {tc:>6.1f}s {fleet_throttled(c, lost):>36}")
    print(f"A/B agreement after the loss: {same:,} of {total:,} verdicts ({same / max(total, 1):.2%})")


if __name__ == "__main__":
    main()
