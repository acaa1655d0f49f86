"""The CLI's ``pidquota run --once`` against the native query and the floor, in one SparkSession.

    python benchmarks/cli_run.py [--events 1000000] [--files 10] [--input flood|realistic|both]

Issue 55 asks for its ratios in ``benchmarks/streaming.py`` *and* in the CLI's own run: the
CLI adds what a user's run has and the benchmark's query has not (its source, its sink with
the metrics and dead letters, the progress table, the quota file). This script makes one
SparkSession, then in it, over the same ``--events`` JSON-lines events in ``--files``
files (``benchmarks/streaming.py``'s inputs, one file per micro-batch): the native query
and the floor (``benchmarks/streaming.py``'s stages, noop sinks), and ``pidquota run --once``
through ``pidquota.cli.main`` in this process (its ``spark_session`` finds this session),
quota 100 per principal as the other benchmark's.

Each rate is given over the whole run and in steady state (a batch's events over the batch
times after the first three, ``benchmarks/streaming.py``'s ``steady``). The run's batch times
are the gaps between its batches' ``metrics`` part files (each batch writes its parts as it
ends); the first of them has no gap before it and is not used. Prints the CLI run's
events/s, the native query's and the floor's, and CLI / native, CLI / floor. Asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* from the root

from benchmarks.streaming import WARM_BATCHES, run_stage, stages, steady, write_input  # noqa: E402
from pidquota.conf.loader import load  # noqa: E402
from pidquota.quota import StaticQuotas  # noqa: E402

QUOTA = 100  # per principal, as benchmarks/streaming.py's


def cli_run(folder: Path, out: Path, quotas: Path) -> dict:
    """``pidquota run --once`` over ``folder``, one file per batch, in this process: its wall
    time and its batch times (the gaps between its batches' metrics files)."""
    from pidquota.cli.main import main

    argv = ["run", "--input", str(folder), "--output", str(out), "--once", "--quotas", str(quotas)]
    argv += [
        "--set",
        "pidquota.max.events.per.trigger=1",
        "--set",
        "pidquota.output.roll.ms=0",
    ]  # a file a batch
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # its banner and progress table
        code = main(argv)
    secs = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"pidquota run exited {code}")
    ends = sorted(f.stat().st_mtime for f in (out / "metrics").glob("part-*.jsonl"))
    return {"secs": secs, "durations": [(b - a) * 1000 for a, b in zip(ends, ends[1:], strict=False)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=10, help="files = micro-batches")
    ap.add_argument("--input", choices=["flood", "realistic", "both"], default="both")
    args = ap.parse_args()
    from pidquota.streaming.session import spark_session

    config = load()
    spark = spark_session(config)
    work = Path(tempfile.mkdtemp(prefix="pidquota-cli-bench-"))
    quotas = work / "quotas.json"
    quotas.write_text(json.dumps({"users": {"<default>": {"producer_ids_rate": QUOTA}}}))
    chosen = stages(config, StaticQuotas({"<default>": QUOTA}))
    try:
        warm = work / "warmup"
        write_input(warm, 20_000, 2, flood=False)
        for name in ("native", "floor"):
            run_stage(spark, config, name, chosen[name], warm, work)
        cli_run(warm, work / "warm-cli", quotas)
        print(f"{args.events:,} events per input, {args.files} batches, one SparkSession")
        for name, flood in (("realistic", False), ("flood", True)):
            if args.input not in (name, "both"):
                continue
            folder = work / name
            write_input(folder, args.events, args.files, flood)
            res = {k: run_stage(spark, config, k, chosen[k], folder, work) for k in ("native", "floor")}
            res["pidquota run --once"] = cli_run(folder, work / f"{name}-cli", quotas)
            report(name, args.events, args.files, res)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()


def report(name: str, n: int, files: int, res: dict) -> None:
    print(
        f"\n[{name}]  events/s over the whole run; in steady state (batches after the first {WARM_BATCHES})"
    )
    whole, calm = {}, {}
    for stage, r in res.items():
        whole[stage] = n / r["secs"]
        durations = r["durations"]
        if stage == "pidquota run --once":  # no gap before its first batch: pad it so steady() skips alike
            durations = [0.0, *durations]
        calm[stage] = steady({"durations": durations}, n) if len(durations) == files else None
        shown = f"{calm[stage]:>10,.0f}" if calm[stage] else "       n/a"
        print(f"  {stage:22s} {whole[stage]:>10,.0f} events/s; steady {shown}  ({r['secs']:6.1f} s)")
    cli = "pidquota run --once"
    for other in ("native", "floor"):
        steady_ratio = f"{calm[cli] / calm[other]:.2f}" if calm[cli] and calm[other] else "n/a"
        print(f"  CLI / {other}: {whole[cli] / whole[other]:.2f} whole run, {steady_ratio} steady")


if __name__ == "__main__":
    main()
