"""The Prometheus exporter's cost on the driver, per batch, by the number of users in it.

    python benchmarks/exporter.py [--users 10000 100000] [--batches 5]

Each batch has one metrics row per user (a user throttled in one row of 500),
as the sink hands it over; ``pidquota.prometheus.max.users`` is 1000. Prints
the time of ``observe_batch`` (first batch, then the median of the rest), one
scrape's time and size, and the process's peak memory. Asserts nothing.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import numpy as np
import pandas as pd
from prometheus_client import generate_latest

from pidquota.observe.exporter import Exporter


def batch(users: int, b: int) -> dict:
    i = np.arange(users)
    throttled = (i % 500 == b % 500).astype(int)
    metrics = pd.DataFrame(
        {
            "principal": [f"User:u{k}" for k in i],
            "timestamp": 1_767_225_600_000 + b * 2000,
            "quota": 60.0,
            "rate": (i % 50).astype(float),
            "tokens": np.where(throttled > 0, 0.5, 5.0),
            "throttle_time_ms": 0.0,
            "events": 10,
            "admitted": i % 7,
            "throttled": throttled,
            "active_pids_estimate": 5,
            "state_bytes": 900,
            "quota_stale": False,
            "failed_publishes": 0,
            "replay": False,
        }
    )
    return {"metrics": metrics, "decisions": pd.DataFrame(), "dead-letters": pd.DataFrame(columns=["reason"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--batches", type=int, default=5)
    args = ap.parse_args()
    print(f"{'users':>8} {'first batch':>12} {'next batches':>13} {'scrape':>8} {'scrape size':>12}")
    for users in args.users:
        exporter, took = Exporter(3_600_000, 1000), []
        for b in range(args.batches):
            frames = batch(users, b)
            began = time.perf_counter()
            exporter.observe_batch(b, frames)
            took.append(time.perf_counter() - began)
        began = time.perf_counter()
        body = generate_latest(exporter.registry)
        scrape = time.perf_counter() - began
        print(
            f"{users:>8,} {took[0]:>11.3f}s {statistics.median(took[1:]):>12.3f}s {scrape:>7.3f}s "
            f"{len(body) / 1024:>9.0f} KiB"
        )
    print(f"peak memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
