"""What Spark's planning of the JSON events' strict parse costs a micro-batch.

    python benchmarks/plan_cost.py [--rounds 10]

Spark plans a streaming query anew in every micro-batch: it analyses and optimizes the
plan, picks the physical operators and generates their Java code (the compiled classes
are cached; the code's text is made again). The strict parse (``formats/events_spark.py``)
is the largest part of the enforcer's plan, although it sees only the lines the screen
left unchecked. Side by side in one session, per round: a fresh plan of the same lines
alone and of the same lines through the strict parse, executed as far as their RDD (what
a batch does before its job runs). Prints the median and best milliseconds of each, the
rounds after the first two (the JVM's warm-up) counted, and the strict parse's share.
Measured on 2026-11-30 with the pytest suite running beside it: the strict parse's plan
took 612 ms a batch (median; best 454) before its fields were read into columns of their
own and its checks became one CASE WHEN, 334 ms (best 241) after: 0.55x. Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* from the root

LINES = [
    '{"timestamp": 1700000000000, "principal": "User:a", "producer_id": 5}',
    '{"timestamp": "late", "principal": "User:x"}',
    "not json",
]


def planned_ms(frame) -> float:
    """A fresh plan of ``frame``, executed as far as its RDD, in ms."""
    start = time.perf_counter()
    frame.select("*")._jdf.queryExecution().executedPlan().execute()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    if args.rounds < 3:
        ap.error("--rounds: at least 3 (the first two are left out)")
    from pidquota.conf.loader import load
    from pidquota.formats.events_spark import parse_events
    from pidquota.streaming.session import spark_session

    spark = spark_session(load())
    lines = spark.createDataFrame([(line,) for line in LINES], "value string")
    frames = {"lines alone": lines, "strict parse": parse_events(lines, 256)}
    times: dict[str, list[float]] = {name: [] for name in frames}
    for _ in range(args.rounds):
        for name, frame in frames.items():
            times[name].append(planned_ms(frame))
    medians = {}
    for name, ms in times.items():
        kept = sorted(ms[2:])
        medians[name] = kept[len(kept) // 2]
        print(f"{name:<14} plan per batch: median {medians[name]:6.0f} ms, best {kept[0]:6.0f} ms")
    extra = medians["strict parse"] - medians["lines alone"]
    print(f"the strict parse adds {extra:.0f} ms to each micro-batch's planning")
    spark.stop()


if __name__ == "__main__":
    main()
