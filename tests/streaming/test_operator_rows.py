"""The stateful operator's rows (``streaming/operator.py``), built without Spark."""

from __future__ import annotations

import numpy as np

from pidquota.quota import ADMIT, THROTTLE, PrincipalQuota, QuotaSettings
from pidquota.streaming.columns import KIND_METRIC
from pidquota.streaming.operator import _INDEX, _judged


def test_a_batch_straddling_the_replay_end_counts_only_its_live_verdicts():
    settings = QuotaSettings(window_ms=60_000)
    quota = PrincipalQuota(2, settings, 0)
    # 4 new PIDs before the replay end (t = 1000), 3 after: R = 2 per minute admits 2, throttles the rest
    ts = np.array([0, 1, 2, 3, 1000, 1001, 1002], dtype=np.int64)
    pids = np.arange(7, dtype=np.int64)
    decisions = quota.judge_batch(ts, pids, np.zeros(7, dtype=np.int64), 1000)
    rows = decisions.rows()
    live = [d.verdict for d in rows if d.timestamp >= 1000]
    assert live == [THROTTLE] * 3 and [d.verdict for d in rows[:2]] == [ADMIT] * 2
    metric = _judged("User:a", quota, decisions, len(ts), 0, False, replay_until=1000)
    assert metric[_INDEX["kind"]] == KIND_METRIC
    got = {k: metric[_INDEX[k]] for k in ("events", "admitted", "throttled", "passed", "ignored")}
    assert got == {"events": 7, "admitted": 0, "throttled": 3, "passed": 4, "ignored": 0}
    whole = _judged("User:a", quota, decisions, len(ts), 0, False)
    assert (whole[_INDEX["admitted"]], whole[_INDEX["throttled"]]) == (2, 5)
