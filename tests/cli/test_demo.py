"""The embedded default: generated traffic, its source, and `pidquota run` with no arguments."""

import os
import subprocess
import sys

import pytest

from pidquota.conf.loader import DEFAULT_QUOTAS
from pidquota.quota import StaticQuotas
from pidquota.sources.demo import DemoStreamReader
from pidquota.traffic.generator import TrafficGenerator

HOUR = 3_600_000
ROGUES = {"User:crash-loop", "User:per-batch", "User:per-error"}


def test_a_generated_hour_with_shipped_quotas_throttles_only_the_rogues(make_enforcer, tmp_path):
    gen = TrafficGenerator(seed=7, rate=40)
    events = [line for chunk in gen.chunks(HOUR) for line in chunk]
    out = make_enforcer(tmp_path, StaticQuotas.from_file(DEFAULT_QUOTAS).snapshot()).run(events)
    throttled = out["metrics"].groupby("principal").throttled.sum()
    assert {p for p, n in throttled.items() if n > 0} == ROGUES
    for good in (
        "User:steady-orders",
        "User:steady-payments",
        "User:txn-ledger",
        "User:returning",
        "User:legacy",
    ):
        assert throttled.get(good, 0) == 0, good
    d = out["decisions"]
    txn = d[d.principal == "User:txn-ledger"]
    assert len(txn) == 10 and set(txn.verdict) == {"ADMIT"}  # epoch bumps are not new PIDs
    assert out["metrics"].events.sum() == len(events)


def test_demo_reader_streams_the_generator_and_resumes_where_it_stopped():
    r = DemoStreamReader({"speed": "1000", "maxBatchMs": "60000", "startMs": "1767225600000"})
    start = r.initialOffset()
    assert start == {"origin": 1767225600000, "t": 1767225600000}
    end = r.latestOffset(start, None)
    assert start["t"] <= end["t"] <= start["t"] + 60_000
    mid = {"origin": start["origin"], "t": start["t"] + 30_000}
    first = [x for p in r.partitions(start, mid) for (x,) in r.read(p)]
    second = [x for p in r.partitions(mid, {**mid, "t": mid["t"] + 30_000}) for (x,) in r.read(p)]
    # a fresh reader (a restarted query) fast-forwards to the checkpointed offset
    again = DemoStreamReader({"startMs": "1"})
    resumed = [x for p in again.partitions(mid, {**mid, "t": mid["t"] + 30_000}) for (x,) in again.read(p)]
    assert resumed == second
    gen = TrafficGenerator(seed=7, rate=50, start_ms=start["origin"])
    assert first + second == gen.events(start["t"] + 60_000)[1]


@pytest.mark.e2e
def test_pidquota_run_with_no_arguments_shows_throttling(tmp_path):
    r = subprocess.run(
        # 20 s of the stream (counted from its first batch's end, not the process's start): the first
        # batch (five minutes of traffic, sources/demo.py) throttles per-batch, the second crash-loop;
        # 10 s was too short for the second on a loaded machine
        [sys.executable, "-m", "pidquota", "run", "--duration", "20"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=os.environ,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    tables, summary = r.stdout.split("pidquota: this run's users:")
    rows = [line.split() for line in tables.splitlines() if line.startswith("User:")]
    throttled = {row[0]: int(row[5].replace("-", "0")) for row in rows}  # the last table wins
    assert "User:crash-loop" in summary and "User:steady-orders" not in summary  # only who was throttled
    assert "-- batch" in tables and "rate/W: new PIDs admitted in the last window W" in tables
    assert throttled["User:crash-loop"] > 0 and throttled["User:per-batch"] > 0
    assert throttled["User:steady-orders"] == 0 and throttled["User:txn-ledger"] == 0
    assert (tmp_path / "pidquota-out" / "decisions").is_dir()
