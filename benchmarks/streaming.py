"""Enforcer versus pass-through, side by side in one run.

    python benchmarks/streaming.py [--events 1000000] [--files 10]

Both queries read the same JSON-lines files with the same file source, parse
and sink; the pass-through has no stateful operator. Two inputs: realistic
PID reuse, and a flood where every event is a new PID. Prints events/s for
both, their ratio, the operator's marginal events/s, and p50/p99 batch
durations. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from conf.loader import load  # noqa: E402
from quota import StaticQuotas  # noqa: E402


def write_input(folder: Path, n: int, files: int, flood: bool, seed: int = 7) -> None:
    """``n`` events over 2 hours from 500 principals, sorted by time, in ``files`` files."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(1_767_225_600_000, 1_767_225_600_000 + 2 * 3_600_000, n))
    principal = rng.integers(0, 500, n)
    if flood:
        pid = np.arange(n) + 10_000_000
    else:  # each principal has 8 long-lived producers; 1% of events are fresh PIDs
        pid = principal * 100 + rng.integers(0, 8, n)
        fresh = rng.random(n) < 0.01
        pid[fresh] = 50_000_000 + np.arange(fresh.sum())
    folder.mkdir(parents=True)
    for k, idx in enumerate(np.array_split(np.arange(n), files)):
        with open(folder / f"part-{k:03d}.jsonl", "w") as f:
            for t, p, q in zip(ts[idx].tolist(), principal[idx].tolist(), pid[idx].tolist(), strict=True):
                f.write(
                    json.dumps(
                        {"timestamp": t, "principal": f"User:u{p}", "producer_id": q, "producer_epoch": 0}
                    )
                    + "\n"
                )


def run_query(spark, kind: str, folder: Path, work: Path, config, quotas) -> tuple[float, list[int], dict]:
    from streaming import query as q
    from streaming.sink import JsonlSink

    out = work / f"out-{kind}-{folder.name}"
    lines = q.file_source(spark, str(folder), 1, str(out / "_ck"))
    frame = q.enforcer(lines, config, quotas) if kind == "enforcer" else q.pass_through(lines, config)
    sink = JsonlSink(out)
    start = time.perf_counter()
    query = q.start(frame, sink, str(out / "_ck"), True, 0, name=f"{kind}-{folder.name}")
    query.awaitTermination()
    secs = time.perf_counter() - start
    durations = [p["batchDuration"] for p in query.recentProgress if p["numInputRows"]]
    return secs, durations, dict(sink.totals.rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=10, help="files = micro-batches (maxFilesPerTrigger 1)")
    args = ap.parse_args()
    from streaming.session import spark_session

    config = load()  # PIDQUOTA_* environment variables apply, e.g. PIDQUOTA_SPARK_SHUFFLE_PARTITIONS=2
    quotas = StaticQuotas({"<default>": 100})
    spark = spark_session(config)
    work = Path(tempfile.mkdtemp(prefix="pidquota-bench-"))
    try:
        print(
            f"{args.events:,} events per input, {args.files} batches, master {config['pidquota.spark.master']}"
        )
        warm = work / "warmup"
        write_input(warm, 20_000, 2, flood=False)
        for kind in ("pass-through", "enforcer"):
            run_query(spark, kind, warm, work, config, quotas)
        for name, flood in (("realistic", False), ("flood", True)):
            folder = work / name
            write_input(folder, args.events, args.files, flood)
            res = {k: run_query(spark, k, folder, work, config, quotas) for k in ("pass-through", "enforcer")}
            (tp, _, _), (te, _, rows_e) = res["pass-through"], res["enforcer"]
            marginal = args.events / (te - tp) if te > tp else float("inf")
            print(
                f"\n[{name}] enforcer wrote {rows_e['decisions']:,} decisions, {rows_e['metrics']:,} metric rows"
            )
            for kind, (secs, durs, _) in res.items():
                p50, p99 = np.percentile(durs, 50), np.percentile(durs, 99)
                print(
                    f"  {kind:<13} {args.events / secs:>10,.0f} events/s  ({secs:6.1f} s; "
                    f"batch p50 {p50 / 1000:.2f} s, p99 {p99 / 1000:.2f} s)"
                )
            print(f"  ratio enforcer / pass-through: {tp / te:.2f}")
            print(f"  stateful operator's own (marginal) rate: {marginal:,.0f} events/s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
