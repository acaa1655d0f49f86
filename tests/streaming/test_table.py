"""The demo table's ``now`` column answers what ``pidquota status`` answers."""

import pandas as pd

from store.state import UserState
from streaming.table import UserTable

W = 3_600_000


def test_now_column_agrees_with_status():
    rows = [
        {
            "principal": "User:crash",
            "timestamp": 10_000,
            "quota": 100.0,
            "tokens": 0.5,
            "rate": 99.0,
            "throttle_time_ms": 18000,
            "admitted_total": 100,
            "throttled_total": 7,
            "state_bytes": 900,
        },
        {
            "principal": "User:steady",
            "timestamp": 10_000,
            "quota": 100.0,
            "tokens": 95.0,
            "rate": 5.0,
            "throttle_time_ms": 0,
            "admitted_total": 5,
            "throttled_total": 0,
            "state_bytes": 300,
        },
        {"principal": "User:free", "timestamp": 10_000, "quota": None, "tokens": None},
    ]
    printed = []
    table = UserTable(W, every_s=0, out=printed.append)
    table.update(3, {"metrics": pd.DataFrame(rows).assign(batch_id=3)})
    lines = {line.split()[0]: line for line in printed[-1].splitlines()[2:]}
    assert lines["User:crash"].rstrip().endswith("THROTTLED 18.0s")  # half a token short at 100/h
    assert lines["User:steady"].rstrip().endswith("ok") and lines["User:free"].rstrip().endswith("ok")
    status = UserState.from_metrics(rows[0], 3, W)
    assert status.throttled and status.wait_ms == 18_000
