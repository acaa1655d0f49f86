"""The embedded default: its traffic, its source, and `pidquota run` with no arguments."""

import os
import subprocess
import sys

from streaming.demo_source import DemoStreamReader, demo_events

MIN = 60_000


def test_demo_traffic_throttles_only_the_rogue_clients(make_enforcer, tmp_path):
    from conf.loader import DEFAULT_QUOTAS
    from quota import StaticQuotas

    events = demo_events(0, 30 * MIN)
    out = make_enforcer(tmp_path, StaticQuotas.from_file(DEFAULT_QUOTAS).snapshot()).run(events)
    m = out["metrics"].groupby("principal").agg({"throttled": "sum", "admitted": "sum", "ignored": "sum"})
    assert m.loc["User:crash-loop", "throttled"] > 200 and m.loc["User:per-batch", "throttled"] > 200
    for steady in ("User:orders", "User:payments", "User:analytics"):
        assert m.loc[steady, "throttled"] == 0
    assert m.loc["User:legacy", "ignored"] == 30 * MIN // 2000 and m.loc["User:legacy", "admitted"] == 0


def test_demo_events_are_a_pure_function_of_the_range():
    whole = demo_events(0, 20_000)
    assert demo_events(0, 7_000) + demo_events(7_000, 20_000) == whole


def test_demo_reader_offsets_advance_with_speed_and_cap():
    r = DemoStreamReader({"speed": "1000", "maxBatchMs": "5000", "startMs": "1000"})
    assert r.initialOffset() == {"t": 1000}
    first = r.latestOffset({"t": 1000}, None)["t"]
    assert 1000 <= first <= 6000
    parts = r.partitions({"t": 0}, {"t": 10_000})
    assert [(p.start, p.end) for p in parts] == [(0, 5000), (5000, 10_000)]
    assert list(r.read(parts[0])) == [(line,) for line in demo_events(0, 5000)]


def test_pidquota_run_with_no_arguments_shows_throttling(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "streaming.cli", "run", "--duration", "25"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=os.environ,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith("User:")]
    throttled = {row[0]: int(row[5].replace("-", "0")) for row in rows}  # the last table wins
    assert throttled["User:crash-loop"] > 0 and throttled["User:per-batch"] > 0
    assert throttled["User:orders"] == 0 and throttled["User:analytics"] == 0
    assert (tmp_path / "pidquota-out" / "decisions").is_dir()
