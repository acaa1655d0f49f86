"""JSON lines from Arrow (``streaming/outputs/jsonl.py``): the same bytes as pandas' ``to_json``."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from pidquota.streaming.outputs import jsonl_kernel
from pidquota.streaming.outputs.jsonl import doubles, jsonl_bytes
from pidquota.streaming.outputs.sink import NULLABLE

pytestmark = pytest.mark.quick


@pytest.fixture(autouse=True, params=["compiled", "arrow"])
def writer(request, monkeypatch):
    """Every test twice: the compiled writer (``jsonl_kernel.py``), then the Arrow path."""
    compiled = jsonl_kernel.compiled()
    assert compiled is not None, "numba is a dependency: the compiled JSON writer must compile here"
    monkeypatch.setattr(jsonl_kernel, "_compiled", compiled if request.param == "compiled" else None)
    return request.param


EDGE_DOUBLES = [
    0.0, -0.0, 1.0, 0.1, 1 / 3, 2 / 3, -2.5, 0.99999999999, 0.999999999949, 5e-11, 1.5e-10, 2.5e-10,
    0.00000000025, 123456.78901234567, 1e15 + 0.5, 9999999999999998.0, 1e16, 1e16 + 2, 1e17, -1e17,
    1e-15, 1e-16, -1e-16, 1.23456789012345e-5, 1e300, 5e-324, np.nan, np.inf, -np.inf, 4.35, 0.5, 1.5,
    2**53, 2**63 - 1.0, 99.99999999995, 0.00000000005,
]  # fmt: skip
EDGE_INTS = [-(2**63), 2**63 - 1, 0, -1, 10**18, -(10**18)]
AWKWARD_STRINGS = [
    "User:alice", 'say "hi"', "back\\slash", "a/b", "line\nbreak", "tab\t", "\x00\x01\x1f\x7f",
    "\b\f\r", "héllo ☃ 𝄞", "\u2028\u2029", "", "}\n{", "User:CN=app/x,O=Acme",
]  # fmt: skip


def pandas_text(table: pa.Table) -> str:
    """What the sink wrote before: the table as pandas frame, then ``to_json``."""
    return table.to_pandas(types_mapper=NULLABLE.get).to_json(orient="records", lines=True, force_ascii=False)


def arrow_text(table: pa.Table) -> str:
    return b"".join(bytes(b) for b in jsonl_bytes(table)).decode("utf-8")


def random_table(rng: np.random.Generator, n: int) -> pa.Table:
    def nulls(values, kind):
        mask = rng.random(n) < 0.2
        return pa.array(values, kind, mask=mask)

    floats = np.concatenate(
        [rng.random(n // 2) * 10.0 ** rng.integers(-17, 18, n // 2), rng.choice(EDGE_DOUBLES, n - n // 2)]
    )
    rng.shuffle(floats)
    signs = np.where(rng.random(n) < 0.3, -1.0, 1.0)
    return pa.table(
        {
            "principal": nulls(rng.choice(AWKWARD_STRINGS, n), pa.string()),
            "producer_id": nulls(
                np.concatenate([rng.integers(-(2**62), 2**62, n - 6), EDGE_INTS]), pa.int64()
            ),
            "producer_epoch": nulls(rng.integers(-1, 32_767, n).astype(np.int32), pa.int32()),
            "count": pa.array(rng.integers(0, 10**12, n), pa.int64()),
            "tokens": nulls(floats * signs, pa.float64()),
            "quota": pa.array(floats, pa.float64()),
            "replay": nulls(rng.random(n) < 0.5, pa.bool_()),
            "quota_stale": pa.array(rng.random(n) < 0.5, pa.bool_()),
            "mode": pa.array(["enforce"] * n, pa.string()),
        }
    )


@pytest.mark.parametrize("seed", range(8))
def test_random_tables_give_the_bytes_pandas_gives(seed):
    table = random_table(np.random.default_rng(seed), 2_000)
    assert arrow_text(table) == pandas_text(table)


def test_each_edge_double_is_written_as_pandas_writes_it():
    column = pa.array(EDGE_DOUBLES + [-x for x in EDGE_DOUBLES], pa.float64())
    ours = doubles(column).to_pylist()
    theirs = pandas_text(pa.table({"x": column})).split("\n")[:-1]
    assert [f'{{"x":{"null" if o is None else o}}}' for o in ours] == theirs
    assert ours[EDGE_DOUBLES.index(2 / 3)] == "0.6666666667"  # the docstring's worked example


def test_a_column_of_few_distinct_doubles_is_written_value_by_value_the_same():
    rng = np.random.default_rng(5)
    few = rng.choice(np.array(EDGE_DOUBLES[:12] + [np.nan, -np.inf]), 400)  # formatted once per value
    table = pa.table({"quota": pa.array(few, pa.float64(), mask=rng.random(400) < 0.1)})
    assert arrow_text(table) == pandas_text(table)


def test_every_awkward_string_is_escaped_as_pandas_escapes_it():
    table = pa.table({"raw": pa.array(AWKWARD_STRINGS + [None], pa.string())})
    text = arrow_text(table)
    assert text == pandas_text(table)
    assert '"a\\/b"' in text and [
        json.loads(line)["raw"] for line in text.split("\n")[:-1]
    ] == AWKWARD_STRINGS + [None]


def test_a_table_longer_than_a_chunk_is_written_whole_and_in_order(monkeypatch):
    from pidquota.streaming.outputs import jsonl

    monkeypatch.setattr(jsonl, "_CHUNK", 7)
    table = random_table(np.random.default_rng(99), 50)
    assert len(list(jsonl_bytes(table))) == 8
    assert arrow_text(table) == pandas_text(table)


@pytest.mark.parametrize(("chunk", "rows", "chunks"), [(262_144, 2_001, 6), (14, 51, 8)])
def test_two_threads_write_a_large_table_in_pieces_and_in_order(monkeypatch, chunk, rows, chunks):
    """From _PARALLEL_MIN rows a table is written in pieces by two threads, while the one before
    is written: sixths of a batch (at least half of _PARALLEL_MIN rows each), or half-chunks of
    a larger one, yielded in order."""
    from pidquota.streaming.outputs import jsonl

    monkeypatch.setattr(jsonl, "_PARALLEL_MIN", 50)
    monkeypatch.setattr(jsonl, "_CHUNK", chunk)
    table = random_table(np.random.default_rng(rows), rows)
    assert len(list(jsonl_bytes(table))) == chunks
    assert arrow_text(table) == pandas_text(table)


def test_an_empty_table_writes_nothing_and_an_unknown_type_is_refused():
    assert list(jsonl_bytes(pa.table({"x": pa.array([], pa.int64())}))) == []
    with pytest.raises(TypeError, match="no JSON writer for a column of type list<item: int64>"):
        list(jsonl_bytes(pa.table({"x": pa.array([[1]])})))


def test_large_string_columns_are_written_as_string_ones():
    table = random_table(np.random.default_rng(3), 300)
    large = table.set_column(0, "principal", table["principal"].cast(pa.large_string()))
    assert arrow_text(large) == pandas_text(table)


def test_the_compiled_writer_is_the_one_that_writes_when_numba_is_there(writer, monkeypatch):
    """Not a silent fall back: with numba, every chunk of supported columns goes through the
    compiled writer (a spy counts its calls), and its bytes are the Arrow path's."""
    from pidquota.streaming.outputs import jsonl

    calls = []
    compiled = jsonl_kernel.compiled()

    def spy(*args):
        calls.append(len(args))
        return compiled(*args)

    monkeypatch.setattr(jsonl_kernel, "_compiled", spy if writer == "compiled" else None)
    table = random_table(np.random.default_rng(11), 500)
    text = arrow_text(table)
    assert len(calls) == (1 if writer == "compiled" else 0)
    assert text == pandas_text(table)
    assert jsonl._compiled_type(pa.int32()) and not jsonl._compiled_type(pa.list_(pa.int64()))


def test_columns_of_only_nulls_and_an_empty_string_are_written_as_pandas_writes_them():
    table = pa.table(
        {
            "client_id": pa.nulls(5, pa.large_string()),
            "n": pa.nulls(5, pa.int64()),
            "x": pa.nulls(5, pa.float64()),
            "b": pa.nulls(5, pa.bool_()),
            "s": pa.array(["", None, "", "é", None], pa.string()),
        }
    )
    assert arrow_text(table) == pandas_text(table)


def test_unsigned_past_int64_and_chunked_strings_are_written_as_pandas_writes_them():
    """uint64 beyond int64's range goes to the Arrow path (the compiled writer's stack is
    int64); a string column of several chunks is combined as large strings."""
    table = pa.table(
        {
            "u": pa.array([2**64 - 1, 2**63, 1], pa.uint64()),
            "s": pa.chunked_array([pa.array(["a", None]), pa.array(["é"])]),
        }
    )
    assert arrow_text(table) == pandas_text(table)


def test_threads_asking_for_the_writer_at_once_all_get_it(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(jsonl_kernel, "_tried", False)
    monkeypatch.setattr(jsonl_kernel, "_compiled", None)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: jsonl_kernel.compiled(), range(4)))
    assert all(g is not None for g in got) and len({id(g) for g in got}) == 1


def test_columns_of_one_value_are_written_as_pandas_writes_them():
    """A column with one value in every row is folded into the text around it by the compiled
    writer (``jsonl._constant``): each type, a constant first and last column, and the near
    misses (a double outside the fixed range, NaN, 0.0 beside -0.0, a value and nulls)."""
    from pidquota.streaming.outputs import jsonl

    n = 50
    table = pa.table(
        {
            "mode": pa.array(["enforce"] * n, pa.string()),
            "pid": pa.array(range(n), pa.int64()),
            "epoch": pa.array([-3] * n, pa.int32()),
            "replay": pa.array([False] * n, pa.bool_()),
            "stale": pa.array([True] * n, pa.bool_()),
            "quota": pa.array([2 / 3] * n, pa.float64()),
            "big": pa.array([1e17] * n, pa.float64()),
            "nan": pa.array([np.nan] * n, pa.float64()),
            "zeros": pa.array([0.0, -0.0] * (n // 2), pa.float64()),
            "some": pa.array(["x"] * (n - 1) + [None], pa.string()),
            "odd": pa.array(['say "hi"/é'] * n, pa.large_string()),
            "client_id": pa.nulls(n, pa.string()),
            "batch_id": pa.array([7] * n, pa.int64()),
        }
    )
    assert arrow_text(table) == pandas_text(table)
    assert jsonl._constant(table["batch_id"].combine_chunks()) == b"7"
    assert jsonl._constant(table["quota"].combine_chunks()) == b"0.6666666667"
    assert jsonl._constant(table["client_id"].combine_chunks()) == b"null"
    for name in ("pid", "big", "nan", "some"):
        assert jsonl._constant(table[name].combine_chunks()) is None, name
    everything_constant = table.select(["mode", "epoch", "replay", "client_id", "batch_id"])
    assert arrow_text(everything_constant) == pandas_text(everything_constant)


def test_a_process_loads_the_compiled_writer_only_once_asked_for_enough_rows(monkeypatch):
    """``jsonl_kernel.wanted``: the Arrow path until the process has been asked for LOAD_AFTER
    rows in all; the chunk that reaches it loads the writer (the same bytes either way)."""
    compiled = jsonl_kernel.compiled()
    loads = []
    monkeypatch.setattr(jsonl_kernel, "_tried", False)
    monkeypatch.setattr(jsonl_kernel, "_compiled", None)
    monkeypatch.setattr(jsonl_kernel, "_asked", 0)
    monkeypatch.setattr(jsonl_kernel, "LOAD_AFTER", 1_000)
    monkeypatch.setattr(jsonl_kernel, "_compile", lambda: loads.append(1) or compiled)
    table = random_table(np.random.default_rng(4), 400)
    texts = [arrow_text(table) for _ in range(2)]
    assert not loads and jsonl_kernel._asked == 800  # two tables by Arrow
    texts.append(arrow_text(table))  # 1,200 asked for: loaded, written compiled
    assert loads == [1] and jsonl_kernel.wanted(1) is compiled and loads == [1]
    assert texts[0] == texts[2] == pandas_text(table)
