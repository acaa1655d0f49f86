"""Distinct new PIDs per user in bounded memory (observe/distinct.py)."""

import numpy as np
import pytest

from pidquota.observe.distinct import EXACT_UP_TO, DistinctCount


def test_exact_up_to_the_cap_and_repeats_count_once():
    c = DistinctCount()
    c.add(range(EXACT_UP_TO))
    c.add(range(100))
    assert c.exact and len(c) == EXACT_UP_TO


@pytest.mark.parametrize("pids", ["sequential", "random"])
def test_past_the_cap_a_sketch_within_three_percent_and_bounded(pids):
    rng = np.random.default_rng(7)
    n = 400_000
    values = np.arange(10**9, 10**9 + n) if pids == "sequential" else rng.choice(2**62, n, replace=False)
    c = DistinctCount()
    for chunk in np.array_split(values, 40):  # batch by batch, as the run adds them
        c.add(chunk)
        c.add(chunk[:50])  # a throttled PID retried
    assert not c.exact
    assert abs(len(c) - n) / n < 0.03
    assert c._registers.nbytes == 16 * 1024  # whatever n is
