"""The operator's rows, verdicts packed, become output rows in Arrow (streaming/outputs/rows.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from pidquota.quota.client import Client
from pidquota.streaming.columns import CLIENT_COLUMNS, DECISION_ARRAYS, PACKED
from pidquota.streaming.outputs.rows import output_rows
from pidquota.streaming.schema import OPERATOR_COLUMNS, OPERATOR_SCHEMA, OUTPUT_SCHEMA

pytestmark = pytest.mark.quick

OPERATOR = to_arrow_schema(OPERATOR_SCHEMA)
OUTPUT = to_arrow_schema(OUTPUT_SCHEMA)


def packed(row: dict) -> dict:
    """A row written with lists, its decision columns packed as the operator packs them."""
    out = dict(row)
    for name, dtype in PACKED.items():
        column = DECISION_ARRAYS[name]
        if out.get(column) is not None:
            out[column] = np.array(out[column], dtype).tobytes()
    return out


def table(*rows: dict) -> pa.Table:
    return pa.Table.from_pylist(
        [{c: packed(r).get(c) for c in OPERATOR_COLUMNS} for r in rows], schema=OPERATOR
    )


ALICE = dict(
    kind="metric",
    principal="User:a",
    quota=2.0,
    timestamp=30,
    admitted=1,
    throttled=1,
    d_producer_id=[7, 8],
    d_producer_epoch=[0, 1],
    d_timestamp=[10, 20],
    d_admitted=[True, False],
    d_throttle_time_ms=[0, 1800000],
    d_tokens=[1.0, 0.5],
)
DEAD = dict(kind="D", raw="{", reason="not valid JSON")  # no arrays: a dead letter stays one row


def test_each_verdict_becomes_a_decision_row_and_the_row_stays():
    bob = dict(kind="metric", principal="User:b", quota=5.0, d_producer_id=[9], d_producer_epoch=[3],
               d_timestamp=[40], d_admitted=[True], d_throttle_time_ms=[0], d_tokens=[4.0])  # fmt: skip
    out = output_rows(table(ALICE, DEAD, bob))
    assert out.schema == OUTPUT
    rows = out.to_pylist()
    got = [
        (r["kind"], r["principal"], r["producer_id"], r["verdict"], r["throttle_time_ms"], r["quota"])
        for r in rows
    ]
    assert got == [  # the decisions first, in row and array order, then the rows themselves
        ("decision", "User:a", 7, "ADMIT", 0, 2.0),
        ("decision", "User:a", 8, "THROTTLE", 1800000, 2.0),
        ("decision", "User:b", 9, "ADMIT", 0, 5.0),
        ("metric", "User:a", None, None, None, 2.0),
        ("D", None, None, None, None, None),
        ("metric", "User:b", None, None, None, 5.0),
    ]
    assert rows[1]["tokens"] == 0.5 and rows[1]["producer_epoch"] == 1 and rows[1]["timestamp"] == 20
    assert rows[1]["admitted"] is None and rows[3]["admitted"] == 1  # the metric count keeps its name
    assert rows[3]["timestamp"] == 30 and rows[4]["raw"] == "{"


def test_chunks_rows_without_verdicts_and_output_rows_already():
    two_chunks = pa.concat_tables([table(DEAD), table(ALICE)])
    out = output_rows(two_chunks)
    assert [r["kind"] for r in out.to_pylist()] == ["decision", "decision", "D", "metric"]
    none = output_rows(table(DEAD, dict(kind="metric", principal="User:c", quota=1.0)))
    assert none.num_rows == 2 and none.schema == OUTPUT
    assert output_rows(out) is out  # no d_ arrays: already output rows
    assert output_rows(table()).num_rows == 0


def test_each_decision_gets_its_pids_client_in_columns():
    app, none = Client("app-1", None, "10.0.0.5", "librdkafka 2.6.1", "b1"), None
    alice = ALICE | {"d_client": [app.joined(), none], "client_id": "app-1", "broker": "b1"}
    rows = output_rows(table(alice, DEAD)).to_pylist()
    assert {k: rows[0][k] for k in CLIENT_COLUMNS} == {
        "client_id": "app-1",
        "transactional_id": None,
        "client_address": "10.0.0.5",
        "client_software": "librdkafka 2.6.1",
        "broker": "b1",
    }
    assert all(rows[1][k] is None for k in CLIENT_COLUMNS)  # its PID named no client
    assert rows[2]["client_id"] == "app-1" and rows[2]["client_address"] is None  # the metric row's own
    assert all(rows[3][k] is None for k in CLIENT_COLUMNS)


def test_rows_without_clients_give_null_client_columns():
    rows = output_rows(table(ALICE)).to_pylist()
    assert [r["client_id"] for r in rows] == [None, None, None]


def test_a_row_whose_clients_are_missing_or_not_one_per_verdict_gives_nulls_beside_named_ones():
    """Rows of the operator's own have one client per verdict, or null for none named; any
    other shape (not the operator's) names no client rather than a wrong one."""
    app = Client("app-1", None, None, None, None).joined()
    bob = dict(kind="metric", principal="User:b", quota=5.0, d_producer_id=[9, 10], d_producer_epoch=[3, 3],
               d_timestamp=[40, 41], d_admitted=[True, True], d_throttle_time_ms=[0, 0], d_tokens=[4.0, 3.0])  # fmt: skip
    carol = bob | {"principal": "User:c", "d_client": [app]}  # one client for two verdicts
    rows = output_rows(
        table(ALICE | {"d_client": [app, app]}, bob, carol | {}, bob | {"d_client": [None, app]})
    )
    clients = rows.column("client_id").to_pylist()[:8]
    assert clients == ["app-1", "app-1", None, None, None, None, None, "app-1"]


def test_packed_verdicts_read_back_whole_from_rows_of_every_size():
    rng = np.random.default_rng(3)
    rows, want = [], []
    for k in range(40):
        n = int(rng.integers(0, 5))
        ids = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64).tolist()
        tokens = rng.random(n).tolist()
        rows.append(dict(kind="metric", principal=f"User:{k}", quota=1.0, d_producer_id=ids, d_producer_epoch=[1] * n,
                         d_timestamp=[k] * n, d_admitted=[bool(k % 2)] * n, d_throttle_time_ms=[k] * n, d_tokens=tokens))  # fmt: skip
        want += [
            (f"User:{k}", i, t, "ADMIT" if k % 2 else "THROTTLE") for i, t in zip(ids, tokens, strict=True)
        ]
    out = output_rows(table(*rows)).to_pylist()
    got = [
        (r["principal"], r["producer_id"], r["tokens"], r["verdict"]) for r in out if r["kind"] == "decision"
    ]
    assert got == want


def test_a_packed_column_not_one_value_per_verdict_is_refused():
    broken = table(ALICE).set_column(
        OPERATOR_COLUMNS.index("d_tokens"),
        "d_tokens",
        pa.array([np.array([1.0], "<f8").tobytes()], pa.binary()),
    )
    with pytest.raises(ValueError, match="d_tokens does not hold one <f8 per verdict"):
        output_rows(broken)
