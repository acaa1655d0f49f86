"""streaming/outputs/sink.py: the metrics rows the actuator is handed, picked per batch."""

import numpy as np
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


def test_the_address_book_learns_the_unlimited_principals_addresses_so_a_shared_one_is_not_acted_on():
    """Issue 54: User:crash (limited) and User:free (no quota) share 10.0.0.5; only the
    decisions named addresses, so the book took 10.0.0.5 for User:crash's own. The operator's
    rows now carry the unlimited principal's addresses, and the book sees it shared."""
    from pidquota.actuate.addresses import AddressBook
    from pidquota.streaming.columns import SEEN_ADDRESSES
    from pidquota.streaming.outputs.rows import output_rows
    from pidquota.streaming.outputs.sink import _unlimited_addresses

    operator_rows = pa.table(
        {
            "kind": ["metric", "metric"],
            "principal": ["User:crash", "User:free"],
            "d_producer_id": pa.array([np.array([1], "<i8").tobytes(), None], pa.binary()),
            SEEN_ADDRESSES: pa.array([None, ["10.0.0.5", "10.0.0.8"]], pa.list_(pa.string())),
        }
    )
    assert _unlimited_addresses(operator_rows) == [
        ("User:free", "10.0.0.5", False),
        ("User:free", "10.0.0.8", False),
    ]
    assert _unlimited_addresses(operator_rows.drop_columns([SEEN_ADDRESSES])) == []
    book = AddressBook()
    book.add([("User:crash", "10.0.0.5", True), ("User:crash", "10.0.0.6", True)])
    assert book.exclusive("User:crash") == ("10.0.0.5", "10.0.0.6")
    assert book.add(_unlimited_addresses(operator_rows)) == {"10.0.0.5"}
    assert book.exclusive("User:crash") == ("10.0.0.6",)
    from pyspark.sql.pandas.types import to_arrow_schema

    from pidquota.streaming.schema import OPERATOR_SCHEMA

    empty = to_arrow_schema(OPERATOR_SCHEMA).empty_table()
    assert SEEN_ADDRESSES not in output_rows(empty).column_names  # never an output column
