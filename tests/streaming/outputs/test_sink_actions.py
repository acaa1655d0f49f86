"""streaming/outputs/sink.py: the metrics rows the actuator is handed, picked per batch."""

import pandas as pd

from pidquota.streaming.outputs.sink import _maybe_throttled


def test_only_rows_that_throttled_or_may_make_a_pid_wait_reach_the_actuator():
    metrics = pd.DataFrame(
        {
            "principal": ["User:crash", "User:low", "User:steady", "User:free"],
            "throttled": [3, 0, 0, 0],
            "tokens": [5.0, 0.5, 40.0, None],  # User:free has no quota: no tokens
        }
    )
    assert list(_maybe_throttled(metrics).principal) == ["User:crash", "User:low"]
    assert _maybe_throttled(metrics.iloc[:0]).empty
