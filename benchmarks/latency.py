"""Decision latency of a long-running query, paced at half the sustained maximum rate.

    python benchmarks/latency.py [--seconds 60] [--rate EVENTS_PER_S] [--trigger-ms 2000]

1. Unless ``--rate`` is given, the sustained maximum is measured first: the
   enforcer with its JSON-lines sink reads 500,000 realistic events (5 files,
   one per micro-batch) with ``availableNow``.
2. A continuous query (processing-time trigger ``--trigger-ms``) then reads a
   folder that a writer fills for ``--seconds``: every 250 ms a file of
   rate/2 x 0.25 s events, each stamped with the wall-clock time at which its
   file appears (renamed into place). That stamp is the event's arrival. The
   writer is its own process, as a broker would be: in the driver it would take
   the driver's interpreter lock from the sink while it writes.
3. The sink notes when each micro-batch's decisions are written. An event's
   latency is that time minus its arrival; the script prints p50, p99 and
   max over every decision row, against the target p99 <= trigger + 1 s, and
   where a paced batch's time goes (Spark's ``durationMs``, median over batches).

Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* from the root

from benchmarks.streaming import write_input
from pidquota.conf.loader import load
from pidquota.quota import StaticQuotas

TICK_S = 0.25


def max_rate(spark, config, quotas, work: Path) -> float:
    """Events/s of the enforcer with its real sink on 500k realistic events."""
    from pidquota.streaming import query as q
    from pidquota.streaming.outputs.sink import JsonlSink

    limit = config["pidquota.principal.max.length"]
    for name, n, files in (("warm", 20_000, 2), ("max", 500_000, 5)):  # the first query warms the workers
        folder, out = work / f"{name}-in", work / f"{name}-out"
        write_input(folder, n, files, flood=False)
        lines = q.file_source(spark, str(folder), 1, str(out / "_ck"), screen=limit)
        start = time.perf_counter()
        q.start(
            q.enforcer(lines, config, quotas), JsonlSink(out), str(out / "_ck"), True, 0
        ).awaitTermination()
    return 500_000 / (time.perf_counter() - start)


def realistic_tick(rng, n: int, fresh_pid: int) -> tuple[str, int]:
    """``n`` realistic events as JSON lines stamped with the wall clock now: 500 users of 8
    steady PIDs each, 1% of events a new PID from ``fresh_pid`` on. Returns them and the next
    new PID."""
    principal = rng.integers(0, 500, n)
    pid = principal * 100 + rng.integers(0, 8, n)
    fresh = rng.random(n) < 0.01
    pid[fresh] = fresh_pid + np.arange(fresh.sum())
    now = int(time.time() * 1000)
    body = "".join(
        f'{{"timestamp": {now}, "principal": "User:u{p}", "producer_id": {q}, "producer_epoch": 0}}\n'
        for p, q in zip(principal.tolist(), pid.tolist(), strict=True)
    )
    return body, fresh_pid + int(fresh.sum())


def writer(folder: Path, rate: float, seconds: float) -> None:
    """Files of realistic events stamped with the moment they appear (its own process)."""
    rng = np.random.default_rng(11)
    per_tick = max(1, round(rate * TICK_S))
    fresh_pid = 50_000_000
    end = time.monotonic() + seconds
    k = 0
    while time.monotonic() < end:
        tick = time.monotonic()
        body, fresh_pid = realistic_tick(rng, per_tick, fresh_pid)
        tmp = folder / f".part-{k:06d}.jsonl.tmp"  # hidden until renamed: the source skips it
        tmp.write_text(body)
        # the stamp is taken before the rename, so a latency is never understated
        os.replace(tmp, folder / f"part-{k:06d}.jsonl")
        k += 1
        time.sleep(max(0.0, TICK_S - (time.monotonic() - tick)))


class TimedSink:
    """The JSON-lines sink, noting when each micro-batch's rows are written."""

    def __init__(self, out: Path):
        from pidquota.streaming.outputs.sink import JsonlSink

        self.inner, self.done = JsonlSink(out), {}

    def __call__(self, batch_df, batch_id: int) -> None:
        self.inner(batch_df, batch_id)
        self.done[batch_id] = time.time() * 1000


def paced(
    spark, config, quotas, work: Path, rate: float, seconds: float, trigger_ms: int
) -> tuple[pd.DataFrame, list[dict]]:
    from pidquota.streaming import query as q

    folder, out, flag = work / "paced-in", work / "paced-out", work / "stop.flag"
    folder.mkdir()
    limit = config["pidquota.principal.max.length"]
    lines = q.file_source(spark, str(folder), 0, str(out / "_ck"), stop_flag=str(flag), screen=limit)
    sink = TimedSink(out)
    query = q.start(q.enforcer(lines, config, quotas), sink, str(out / "_ck"), False, trigger_ms)
    pacer = multiprocessing.get_context("spawn").Process(target=writer, args=(folder, rate, seconds))
    pacer.start()
    try:
        pacer.join()
    finally:
        if pacer.is_alive():  # an error or Ctrl-C here: stop writing
            pacer.terminate()
    if pacer.exitcode != 0:
        raise SystemExit(f"the pacing writer failed (exit code {pacer.exitcode}); no latency to report")
    time.sleep(2 * trigger_ms / 1000 + 2)  # the last files are decided
    flag.touch()
    while query.isActive and query.status.get("isTriggerActive"):
        time.sleep(0.05)
    query.stop()
    frames = [
        pd.read_json(f, lines=True, convert_dates=False)
        for f in sorted((out / "decisions").glob("part-*.jsonl"))
    ]
    decisions = pd.concat(frames, ignore_index=True)
    decisions["latency_ms"] = decisions.batch_id.map(sink.done) - decisions.timestamp
    return decisions, [p["durationMs"] for p in query.recentProgress if p["numInputRows"]]


def batch_parts(durations: list[dict]) -> str:
    """Median milliseconds of each part of a batch (Spark's ``durationMs``), largest first."""
    keys = {k for d in durations for k in d if k != "triggerExecution"}
    medians = {k: float(np.median([d.get(k, 0) for d in durations])) for k in keys}
    total = np.median([d.get("triggerExecution", 0) for d in durations])
    parts = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(medians.items(), key=lambda kv: -kv[1]) if v >= 1)
    return f"a paced batch (median of {len(durations)}): {total:,.0f} ms; {parts}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--rate", type=float, default=0, help="the sustained maximum (default: measure it)")
    ap.add_argument("--trigger-ms", type=int, default=0, help="default: pidquota.trigger.interval.ms")
    args = ap.parse_args()
    from pidquota.streaming.session import spark_session

    config = load()
    trigger_ms = args.trigger_ms or config["pidquota.trigger.interval.ms"]
    quotas = StaticQuotas({"<default>": 100})
    spark = spark_session(config)
    work = Path(tempfile.mkdtemp(prefix="pidquota-latency-"))
    try:
        rate = args.rate or max_rate(spark, config, quotas, work)
        print(f"sustained maximum: {rate:,.0f} events/s; pacing at half: {rate / 2:,.0f} events/s")
        d, durations = paced(spark, config, quotas, work, rate / 2, args.seconds, trigger_ms)
        lat = d.latency_ms.to_numpy()
        p50, p99 = np.percentile(lat, 50), np.percentile(lat, 99)
        print(
            f"{len(d):,} decisions over {args.seconds:.0f} s, trigger {trigger_ms} ms: latency p50 {p50:,.0f} ms, "
            f"p99 {p99:,.0f} ms, max {lat.max():,.0f} ms (target p99 <= {trigger_ms + 1000:,} ms: "
            f"{'met' if p99 <= trigger_ms + 1000 else 'missed'})"
        )
        print(batch_parts(durations))
        row = {"rate": rate / 2, "p50_ms": p50, "p99_ms": p99, "trigger_ms": trigger_ms}
        print("ROW latency " + json.dumps(row))  # for benchmarks/streaming.py --all
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
