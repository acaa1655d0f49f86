"""The operator's rows, verdicts in arrays, become output rows in the JVM (streaming/query.py)."""

from __future__ import annotations

import pytest

from pidquota.streaming.query import decision_rows
from pidquota.streaming.schema import OPERATOR_COLUMNS, OPERATOR_SCHEMA, OUTPUT_SCHEMA


def _row(**values):
    return tuple(values.get(c) for c in OPERATOR_COLUMNS)


@pytest.mark.parametrize("ansi", ["true", "false"])
def test_each_verdict_becomes_a_decision_row_and_the_row_stays(spark, ansi):
    rows = [
        _row(
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
        ),
        _row(kind="D", raw="{", reason="not valid JSON"),  # no arrays: a dead letter stays one row
    ]
    old = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", ansi)  # without ANSI, size(NULL) is -1
    try:
        out = [r.asDict() for r in decision_rows(spark.createDataFrame(rows, OPERATOR_SCHEMA)).collect()]
    finally:
        spark.conf.set("spark.sql.ansi.enabled", old)
    assert [f.name for f in OUTPUT_SCHEMA.fields] == list(out[0])
    got = [(r["kind"], r["producer_id"], r["verdict"], r["throttle_time_ms"], r["quota"]) for r in out]
    assert got == [
        ("decision", 7, "ADMIT", 0, 2.0),
        ("decision", 8, "THROTTLE", 1800000, 2.0),
        ("metric", None, None, None, 2.0),
        ("D", None, None, None, None),
    ]
    assert out[1]["tokens"] == 0.5 and out[1]["producer_epoch"] == 1 and out[1]["timestamp"] == 20
    assert out[1]["admitted"] is None and out[2]["admitted"] == 1  # the metric count keeps its name
