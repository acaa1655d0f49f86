"""The run's last lines (cli/run.py ``_say_end``) from the sink's running totals, without Spark."""

from argparse import Namespace
from types import SimpleNamespace

import pyarrow as pa

from pidquota.cli.run import _say_end
from pidquota.streaming.columns import OUTPUTS
from pidquota.streaming.outputs.sink import BatchTotals


def parts(principals: list[str], dead_from: list[str] = ()) -> dict[str, pa.Table]:
    out = {name: pa.table({"x": pa.array([], pa.int64())}) for name in OUTPUTS}
    out["decisions"] = pa.table({"principal": pa.array(principals, pa.string())})
    out["dead-letters"] = pa.table({"source": pa.array(list(dead_from), pa.string())})
    out["skipped"] = pa.table({"what": pa.array([], pa.string()), "count": pa.array([], pa.int64())})
    return out


def end(totals: BatchTotals, capsys, stream: str = "err") -> str:
    plan = SimpleNamespace(
        demo=False, resumed=False, checkpoint="ck", config={"pidquota.mode": "enforce"}, out="o", act=None
    )
    _say_end(Namespace(input="in", output="o"), plan, totals, None)
    return getattr(capsys.readouterr(), stream)


def test_decisions_for_user_anonymous_are_named_with_the_fix(capsys):
    totals = BatchTotals()
    totals.batches = 2
    totals.add(parts(["User:ANONYMOUS", "User:a", "User:ANONYMOUS"]))
    totals.add(parts(["User:ANONYMOUS"]))
    assert totals.anonymous == 3 and totals.rows["decisions"] == 4
    err = end(totals, capsys)
    assert "warning: 3 decisions are for User:ANONYMOUS" in err and "SASL or mTLS" in err


def test_authenticated_principals_draw_no_such_warning(capsys):
    totals = BatchTotals()
    totals.batches = 1
    totals.add(parts(["User:a", "User:anonymous-app"]))
    assert totals.anonymous == 0 and "ANONYMOUS" not in end(totals, capsys)


def test_dead_letters_are_counted_per_file_the_most_first():
    totals = BatchTotals()
    files = (
        ["file:///in/b.jsonl"] * 30
        + ["file:///in/a.jsonl"] * 11
        + ["file:///in/c.jsonl", "file:///in/d.jsonl"]
    )
    totals.add(parts([], files))
    totals.add(parts([], ["topic/0@5"]))  # a Kafka record's position is no file
    assert totals.dead_by_file == {
        "file:///in/b.jsonl": 30,
        "file:///in/a.jsonl": 11,
        "file:///in/c.jsonl": 1,
        "file:///in/d.jsonl": 1,
    }


def test_the_end_names_the_files_with_the_most_dead_letters(capsys):
    totals = BatchTotals()
    totals.batches = 1
    totals.add(
        parts(
            ["User:a"],
            ["file:///in/b.jsonl"] * 30 + ["file:///in/a.jsonl"] * 11 + ["file:/in/c", "file:/in/d"],
        )
    )
    out = end(totals, capsys, "out")
    assert (
        "pidquota: dead letters by file: /in/b.jsonl 30, /in/a.jsonl 11, /in/c 1 (and 1 more file)\n" in out
    )


def test_pidquota_s_own_clients_are_not_counted_as_anonymous(capsys):
    """Issue 42 §3: the actuator's journal producer on an unauthenticated listener was counted,
    and the warning advised an authenticated listener for it."""
    totals = BatchTotals()
    totals.batches = 1
    got = parts(["User:ANONYMOUS", "User:ANONYMOUS", "User:ANONYMOUS"])
    got["decisions"] = got["decisions"].append_column("client_id", pa.array(["pidquota", "pidquota", None]))
    totals.add(got)
    assert totals.anonymous == 1
    assert "warning: 1 decisions are for User:ANONYMOUS" in end(totals, capsys)
