"""Core benchmark: events and decisions per second of ``quota`` on one core,
and bytes of state per tracked PID against an exact Python set.

    python benchmarks/core.py [--events 1000000]

Prints numbers; asserts nothing. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc

import numpy as np

from pidquota.quota import PrincipalQuota, QuotaSettings

S = QuotaSettings()
MIN = 60_000


def realistic(n: int, rng: np.random.Generator):
    """200 principals-worth of traffic folded into one: 2000 long-lived PIDs
    producing every few seconds, plus 2% of events from fresh PIDs."""
    ts = np.sort(rng.integers(0, 6 * S.window_ms, n))
    pids = rng.integers(0, 2000, n)
    fresh = rng.random(n) < 0.02
    pids[fresh] = 1_000_000 + np.arange(fresh.sum())
    return ts, pids, np.zeros(n, dtype=np.int64)


def flood(n: int):
    """Every event a new PID (a crash loop gone wild)."""
    ts = np.arange(n, dtype=np.int64) * 10
    return ts, np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64)


def run(name, rate, ts, pids, epochs, batch=50_000):
    q = PrincipalQuota(rate, S)
    decisions = 0
    start = time.perf_counter()
    for i in range(0, len(ts), batch):
        state = PrincipalQuota.from_bytes(q.to_bytes(), S) if i else q  # as the stream does
        decisions += len(state.judge_batch(ts[i : i + batch], pids[i : i + batch], epochs[i : i + batch]))
        q = state
    secs = time.perf_counter() - start
    print(
        f"{name:<34} {len(ts) / secs:>12,.0f} events/s {decisions / secs:>12,.0f} decisions/s "
        f"({decisions:,} decisions, state {q.size_bytes:,} B)"
    )


def memory(n: int):
    q = PrincipalQuota(n, S)  # quota n: all n PIDs admitted, one layer sized for n
    q.observe_batch(np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
    bloom = len(q.to_bytes())
    tracemalloc.start()
    exact = set(range(10**9, 10**9 + n))  # large ints, as PIDs are
    exact_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del exact
    print(
        f"state for {n:,} tracked PIDs: bloom {bloom / n:.2f} B/PID ({bloom:,} B), "
        f"python set {exact_bytes / n:.1f} B/PID ({exact_bytes:,} B), "
        f"ratio {exact_bytes / bloom:.0f}x smaller"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    print(f"python {sys.version.split()[0]}, one core, {args.events:,} events per case")
    run("realistic reuse, quota 1000/h", 1000, *realistic(args.events, rng))
    run("flood, quota 100/h (mostly THROTTLE)", 100, *flood(args.events))
    run("flood, quota 1e9/h (all ADMIT)", 10**9, *flood(min(args.events, 300_000)))
    for n in (1_000, 100_000):
        memory(n)


if __name__ == "__main__":
    main()
