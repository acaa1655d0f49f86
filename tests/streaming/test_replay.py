"""Cold start from the log (issue 13): a run that lost its checkpoint replays the last
W + W/layer.count before it takes over (``--replay-until``), and does not throttle the
long-lived producers an uninterrupted run knows.

Three generated hours with a fleet of 300 steady producers under a quota of 100 per
hour, plus rogue clients, are produced to one Kafka partition in event-time order.

* A reads all of it, uninterrupted.
* B lost its checkpoint at 2.5 h: it starts at the first offset at or after
  2.5 h - W - W/4 (what ListOffsets by CreateTime returns on Kafka; the test computes the
  offset from the produce order, as it did on Tansu, which looked timestamps up by append time) with ``--replay-until`` 2.5 h.
* C restarts naively at 2.5 h, from the first offset at or after it.

From 2.5 h on, B must agree with A on at least 99% of verdicts and throttle no
fleet PID; C's fleet throttles are the harm B avoids. ``benchmarks/cold_start.py``
prints the same numbers at a larger scale.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pidquota.traffic.generator import TrafficGenerator
from pidquota.traffic.mixes import validate_mix

W = 3_600_000
SPAN = W + W // 4  # 4 layers
MIX = {
    "User:fleet": {"behaviour": "steady", "producers": 300},
    "User:crash-loop": {"behaviour": "crash-loop"},
    "User:per-batch": {"behaviour": "per-batch"},
}
QUOTAS = {"<default>": 200, "User:fleet": 100, "User:crash-loop": 60, "User:per-batch": 60}
TOPIC = "cold-start"


def agreement(a: pd.DataFrame, b: pd.DataFrame, since: int) -> tuple[float, int]:
    """The share of verdicts from ``since`` on that A and B give alike (a row only one of
    them has is a disagreement), and how many rows that is."""
    key = ["principal", "producer_id", "timestamp"]
    a, b = (d[d.timestamp >= since][[*key, "verdict"]] for d in (a, b))
    both = a.merge(b, on=key, how="outer", suffixes=("_a", "_b"))
    same = (both.verdict_a == both.verdict_b).sum()
    return same / max(len(both), 1), len(both)


def fleet_throttled(decisions: pd.DataFrame, since: int) -> int:
    """Distinct fleet PIDs throttled from ``since`` on."""
    d = decisions[(decisions.principal == "User:fleet") & (decisions.timestamp >= since)]
    return d[d.verdict == "THROTTLE"].producer_id.nunique()


@pytest.fixture(scope="module")
def runs(kafka, spark, tmp_path_factory):
    from harness.enforcer import Enforcer

    gen = TrafficGenerator(seed=5, rate=5, mix=validate_mix(MIX, "the cold-start mix"))
    times, lines, keys = gen.keyed_events(gen.start_ms + 3 * W)
    order = np.argsort(times, kind="stable")
    times, lines = times[order], [lines[i] for i in order]
    kafka.produce(TOPIC, lines, [keys[i] for i in order], partitions=1)
    lost = gen.start_ms + int(2.5 * W)
    url = f"kafka://{kafka.bootstrap}/{TOPIC}"
    tmp = tmp_path_factory.mktemp("cold-start")

    def run(name: str, start_ms: int | None, replay_until: int | None):
        offsets = "earliest"
        if start_ms is not None:
            offsets = json.dumps({TOPIC: {"0": int(np.searchsorted(times, start_ms))}})
        settings = {"pidquota.kafka.starting.offsets": offsets, "pidquota.max.events.per.trigger": "10000"}
        enforcer = Enforcer(spark, tmp / name, QUOTAS, replay_until=replay_until, **settings)
        return enforcer.run_kafka(url)

    a = run("a", None, None)
    b = run("b", lost - SPAN, lost)
    c = run("c", lost, None)
    return a, b, c, lost, len(lines)


def test_the_rebuilt_run_agrees_with_the_uninterrupted_one(runs):
    a, b, _, lost, _ = runs
    share, rows = agreement(a["decisions"], b["decisions"], lost)
    print(f"\nA/B agreement from 2.5 h: {share:.2%} of {rows} verdicts")
    assert rows > 1000
    assert share >= 0.99
    assert fleet_throttled(b["decisions"], lost) == 0
    assert fleet_throttled(a["decisions"], lost) == 0


def test_the_naive_restart_throttles_the_fleet(runs):
    _, _, c, lost, _ = runs
    harmed = fleet_throttled(c["decisions"], lost)
    print(f"\nnaive restart: {harmed} of 300 long-lived fleet PIDs throttled")
    # 300 PIDs new within a minute against a burst of 100, plus the little that refills meanwhile
    assert 190 <= harmed <= 200


def test_replayed_rows_are_marked_and_the_rest_are_not(runs):
    _, b, _, lost, _ = runs
    for kind in ("decisions", "metrics"):
        rows = b[kind]
        assert (rows.replay == (rows.timestamp < lost)).all(), kind
        assert rows.replay.any() and not rows.replay.all(), kind
        assert (rows["mode"] == "enforce").all()
    assert b["decisions"][b["decisions"].replay].verdict.eq("THROTTLE").any()  # rebuilt, never published


def test_without_a_replay_nothing_is_marked(runs):
    a, _, _, _, events = runs
    assert not a["decisions"].replay.any() and not a["metrics"].replay.any()
    assert a["metrics"].events.sum() == events
