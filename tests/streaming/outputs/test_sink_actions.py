"""streaming/outputs/sink.py: the metrics rows the actuator is handed, picked per batch."""

import pandas as pd
import pyarrow as pa

from pidquota.streaming.outputs.sink import _clients, _maybe_throttled


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
    # the principals acted on too: the closed loop counts their new PIDs
    assert list(_maybe_throttled(metrics, {"User:steady"}).principal) == [
        "User:crash",
        "User:low",
        "User:steady",
    ]


def test_the_closed_loop_gets_each_principals_throttled_decisions_by_client_id():
    decisions = pa.table(
        {
            "principal": ["User:crash"] * 4 + ["User:old", "User:steady"],
            "client_id": ["loop", "loop", None, "steady", "loop", "app"],
            "verdict": ["THROTTLE", "THROTTLE", "THROTTLE", "ADMIT", "THROTTLE", "THROTTLE"],
            "replay": [False, None, False, False, True, False],
        }
    )
    assert sorted(_clients(decisions)) == [("User:crash", "loop", 2), ("User:steady", "app", 1)]
    unnamed = decisions.set_column(1, "client_id", pa.nulls(6, pa.string()))
    assert _clients(unnamed) == [] and _clients(decisions.slice(0, 0)) == []
