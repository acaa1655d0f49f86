"""JSON lines straight from an Arrow table, byte for byte what pandas writes.

The sink used to turn each batch into a pandas frame and call
``DataFrame.to_json(orient="records", lines=True, force_ascii=False)``. On a
flood batch of a million decisions that took about 2.9 s, a fifth of the
batch. :func:`jsonl_bytes` writes the same bytes from the Arrow table, column by
column, in about a third of the time: every column becomes one Arrow string
array of JSON values, and Arrow joins them row by row with the keys between.

How each column type is written (the sink's output has no other types):

- **integers**: decimal, Arrow's cast; a null is ``null`` (pandas' ``Int64``);
- **booleans**: ``true``/``false``, a null is ``null``;
- **strings**: each *distinct* value goes through pandas' own encoder once, so
  escaping is pandas' (``"`` → ``\\"``, ``/`` → ``\\/``, control characters as
  ``\\u00XX``, other characters as they are), then is taken per row;
- **doubles**: pandas' ujson rule with ``double_precision=10``, in numpy. For
  ``1e-15 <= |v| <= 1e16``: ``w = trunc(|v|)``, ``t = (|v| - w) * 1e10``,
  ``f = trunc(t)``; ``f`` goes up by one when ``t - f > 0.5``, or when it is
  exactly 0.5 and ``f`` is 0 or odd (ujson's rule); ``f = 1e10`` carries into
  ``w``. The text is ``w.f`` with ``f`` as ten digits, trailing zeros dropped
  (``w.0`` when ``f`` is 0), and ``-`` in front of a negative value. Worked
  example: ``v = 2/3``: ``w = 0``, ``t = 6666666666.67``, ``f = 6666666666``,
  ``t - f = 0.67 > 0.5`` so ``f = 6666666667``: ``0.6666666667``. Outside that
  range (rare) it is C's ``%.10g`` (``1e+17``); NaN and ±inf are ``null``.

Where numba is there (it is a dependency), a chunk of such columns is written by the
compiled writer of ``jsonl_kernel.py`` instead: the same bytes, by the same rules, in one pass
over the rows rather than a string array per column and a join (on a flood's million
decisions into ten files, ``write_jsonl`` took 0.57 s instead of 0.75 to 0.95). This module's Arrow
path stays the reference, and writes where numba cannot, and in a process that has not yet
been asked for ``jsonl_kernel.LOAD_AFTER`` rows (a short run never pays numba's import).

``tests/streaming/outputs/test_jsonl.py`` checks the bytes of both against pandas on
random tables with nulls, edge doubles and awkward strings.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pidquota.streaming.outputs import jsonl_kernel

_PLACES = 10**10  # pandas' to_json double_precision=10
_FIXED_MAX = 1e16  # ujson's thres_max, (double)1e16 - 1
_FIXED_MIN = 1e-15  # ujson's thres_min
_CHUNK = 262_144  # rows per join: what is held in memory at once, besides the table
_PARALLEL_MIN = 20_000  # rows from which two threads write a table faster than one
_PIECES = 6  # a large table's pieces: the writes of the first ones overlap the making of the next
_TEXT = pa.large_string()  # 64-bit offsets: a chunk of long dead letters may pass 2 GiB


def jsonl_bytes(table: pa.Table) -> Iterator[memoryview]:
    """``table`` as JSON lines, one buffer per chunk of rows, made as they are asked for;
    their concatenation is what ``table.to_pandas(...).to_json(orient="records", lines=True,
    force_ascii=False)`` writes (with ``Int64``/``Int32``/``string`` dtypes for the nullable
    columns)."""
    n = table.num_rows
    if n < _PARALLEL_MIN:
        for start in range(0, n, _CHUNK):
            yield _chunk(table.slice(start, _CHUNK))
        return
    # Two threads make the pieces (up to _CHUNK / 2 rows, a sixth of the table or more) while
    # the caller writes the one before them: the compiled writer and Arrow's kernels release
    # the GIL, as a file's write does, and on the driver, in foreachBatch, the executors' cores
    # are idle. Yielded in order: the same bytes. At most four pieces are held at once (the
    # caller's last one, the one being written, two being made), each up to _CHUNK / 2 rows.
    size = min(_CHUNK // 2, max(_PARALLEL_MIN // 2, -(-n // _PIECES)))
    starts = range(0, n, size)
    with ThreadPoolExecutor(2, thread_name_prefix="pidquota-jsonl") as pool:
        making = [pool.submit(_chunk, table.slice(at, size)) for at in starts[:2]]
        for i in range(len(starts)):
            done = making.pop(0).result()
            if i + 2 < len(starts):
                making.append(pool.submit(_chunk, table.slice(starts[i + 2], size)))
            yield done


def _chunk(table: pa.Table) -> memoryview:
    writer = jsonl_kernel.wanted(table.num_rows)
    if writer is not None and table.num_columns and all(_compiled_type(f.type) for f in table.schema):
        return _compiled_chunk(table, writer)
    parts: list = []
    for i, name in enumerate(table.column_names):
        column = table[name]
        if pa.types.is_string(column.type):
            column = column.cast(_TEXT)  # before combining: a slice's text may pass 2 GiB
        key = pa.scalar(("{" if i == 0 else ",") + _key(name) + ":", _TEXT)
        parts += [key, _values(column.combine_chunks())]
    parts.append(pa.scalar("}\n", _TEXT))
    lines = pc.binary_join_element_wise(*parts, pa.scalar("", _TEXT))
    offsets = np.frombuffer(lines.buffers()[1], np.int64)[lines.offset : lines.offset + len(lines) + 1]
    return memoryview(lines.buffers()[2])[offsets[0] : offsets[-1]]


def _compiled_type(kind: pa.DataType) -> bool:
    """Whether the compiled writer takes a column of this type (uint64 may pass int64's range:
    the Arrow path writes it)."""
    return (
        (pa.types.is_integer(kind) and kind != pa.uint64())
        or pa.types.is_boolean(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
    )


def _compiled_chunk(table: pa.Table, writer) -> memoryview:
    """``table`` as JSON lines by the compiled writer (``jsonl_kernel.py``): the columns as
    stacks of one type, the strings' distinct values encoded once, then one pass over the rows.
    A column with one value in every row of the chunk (:func:`_constant`: a client column the
    input does not name, the mode, the batch id) is not a column for the kernel: its key and
    value join the text copied before the next column, e.g. ``,"mode":"enforce","batch_id":7}``
    + newline as one copy per row rather than two keys and two values."""
    n = table.num_rows
    stacks: dict[int, list] = {k: [] for k in (jsonl_kernel.INT, jsonl_kernel.DOUBLE, jsonl_kernel.BOOL)}
    kinds, rows, texts, keys, overs, codes, valids = [], [], [], [], [], [], []
    fixed, lengths, pending = 0, np.zeros(n, np.int64), b""  # lengths: each row's string bytes
    for c, name in enumerate(table.column_names):
        column = table[name]
        if pa.types.is_string(column.type):
            column = column.cast(_TEXT)  # before combining: a slice's text may pass 2 GiB
        column = column.combine_chunks()
        key = (("{" if c == 0 else ",") + _key(name) + ":").encode()
        same = _constant(column)
        if same is not None:
            pending += key + same
            continue
        keys.append(pending + key)
        pending = b""
        valid = np.ones(n, np.uint8)
        if column.null_count:
            valid = pc.is_valid(column).to_numpy(zero_copy_only=False).astype(np.uint8)
        kind = column.type
        if pa.types.is_integer(kind):
            kinds.append(jsonl_kernel.INT)
            stacks[jsonl_kernel.INT].append(column.cast(pa.int64()).fill_null(0).to_numpy())
            fixed += jsonl_kernel.INT_CHARS
        elif pa.types.is_boolean(kind):
            kinds.append(jsonl_kernel.BOOL)
            stacks[jsonl_kernel.BOOL].append(column.fill_null(False).to_numpy(zero_copy_only=False))
            fixed += 5
        elif pa.types.is_floating(kind):
            kinds.append(jsonl_kernel.DOUBLE)
            v = column.cast(pa.float64()).fill_null(0.0).to_numpy()
            valid &= np.isfinite(v)
            stacks[jsonl_kernel.DOUBLE].append(v)
            overs.append(_outside(v, valid, texts))
            fixed += jsonl_kernel.DOUBLE_CHARS
        else:
            kinds.append(jsonl_kernel.STRING)
            codes.append(_string_codes(column, texts, lengths))
        valids.append(valid)
        rows.append(len(stacks[kinds[-1]]) - 1 if kinds[-1] != jsonl_kernel.STRING else len(codes) - 1)
    keys.append(pending + b"}\n")
    text_at = np.zeros(len(texts) + 1, np.int64)
    np.cumsum([len(t) for t in texts], out=text_at[1:])
    size = n * (fixed + sum(map(len, keys))) + int(lengths.sum())
    out = np.frombuffer(pa.allocate_buffer(size), np.uint8)  # Arrow's pool: pages reused, not faulted anew
    written = writer(
        np.array(kinds, np.int8), np.array(rows, np.int32), np.frombuffer(b"".join(keys), np.uint8),
        np.cumsum([0, *map(len, keys)]), _stack(stacks[jsonl_kernel.INT], np.int64, n),
        _stack(stacks[jsonl_kernel.DOUBLE], np.float64, n), _stack(overs, np.int32, n),
        _stack(stacks[jsonl_kernel.BOOL], np.uint8, n), _stack(valids, np.uint8, n), _stack(codes, np.int32, n),
        np.frombuffer(b"".join(texts), np.uint8), text_at, out,
    )  # fmt: skip
    return memoryview(out)[:written]


def _constant(column: pa.Array) -> bytes | None:
    """The JSON text of ``column``'s one value when every row holds it (``null`` when all are
    null), else None. A double counts only inside ujson's fixed range (then :func:`doubles`
    writes it, as for any row); a column of nulls and one value is not constant."""
    n = len(column)
    if column.null_count == n:
        return b"null"
    if column.null_count:  # nulls and a value: not constant
        return None
    kind = column.type
    if pa.types.is_floating(kind):
        v = column.to_numpy(zero_copy_only=False)
        a = abs(float(v[0]))
        if not (v == v[0]).all() or a > _FIXED_MAX or (a != 0 and a < _FIXED_MIN):
            return None  # NaN never equals itself: not constant either
        return doubles(column.slice(0, 1))[0].as_py().encode()
    ends = pc.min_max(column)
    low, high = ends["min"].as_py(), ends["max"].as_py()
    if low != high:
        return None
    if pa.types.is_boolean(kind):
        return b"true" if low else b"false"
    if pa.types.is_integer(kind):
        return str(low).encode()
    return _encoded_strings([low])[0].encode()


def _outside(v: np.ndarray, valid: np.ndarray, texts: list[bytes]) -> np.ndarray:
    """Per row: -1, or the index in ``texts`` of its double's text where the value is outside
    ujson's fixed range (C's ``%.10g``, as :func:`doubles` writes it); ``texts`` grows."""
    a = np.abs(v)
    outside = valid.astype(bool) & ((a > _FIXED_MAX) | ((a != 0) & (a < _FIXED_MIN)))
    index = np.full(len(v), -1, np.int32)
    if outside.any():
        where = np.flatnonzero(outside)
        index[where] = np.arange(len(texts), len(texts) + len(where), dtype=np.int32)
        texts += [f"{x:.10g}".encode() for x in v[where]]
    return index


def _string_codes(column: pa.Array, texts: list[bytes], lengths: np.ndarray) -> np.ndarray:
    """Per row: the index in ``texts`` of its string's JSON text (-1 for a null), each distinct
    value encoded once by pandas' encoder; ``texts`` grows, ``lengths`` adds each row's text."""
    if column.null_count == len(column):  # e.g. a client column the input does not name
        lengths += 4
        return np.full(len(column), -1, np.int32)
    distinct = pc.unique(column).drop_null()
    base = len(texts)
    texts += [t.encode() for t in _encoded_strings(distinct.to_pylist())]
    sizes = np.array([len(t) for t in texts[base:]] + [4], np.int64)  # the last: null
    codes = pc.index_in(column, distinct).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
    lengths += sizes[codes]  # -1: the null's 4
    return np.where(codes >= 0, codes + base, -1).astype(np.int32)


def _stack(columns: list[np.ndarray], kind, n: int) -> np.ndarray:
    return np.stack(columns).astype(kind, copy=False) if columns else np.zeros((0, n), kind)


def _values(column: pa.Array) -> pa.Array:
    """One JSON value per row of ``column``, as a large string array without nulls."""
    kind = column.type
    if pa.types.is_integer(kind):
        text = pc.cast(column, _TEXT)
    elif pa.types.is_boolean(kind):
        text = pc.if_else(column, pa.scalar("true", _TEXT), pa.scalar("false", _TEXT))
    elif pa.types.is_floating(kind):
        distinct = pc.unique(column)
        few = len(distinct) * 4 < len(column)  # e.g. the quota: one per principal
        text = pc.take(doubles(distinct), pc.index_in(column, distinct)) if few else doubles(column)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        distinct = pc.unique(column).drop_null()
        encoded = pa.array(_encoded_strings(distinct.to_pylist()), _TEXT)
        text = pc.take(encoded, pc.index_in(column, distinct))
    else:
        raise TypeError(
            f"no JSON writer for a column of type {kind}; only integers, doubles, booleans, strings"
        )
    return pc.fill_null(text.cast(_TEXT), pa.scalar("null", _TEXT))


@functools.cache
def _key(name: str) -> str:
    """A column name as pandas writes it as a key."""
    return _encoded_strings([name])[0]


def _encoded_strings(values: list[str]) -> list[str]:
    """Each of ``values`` as pandas' encoder writes it, quotes included."""
    if not values:
        return []
    text = pd.DataFrame({"v": pd.array(values, dtype="string")}).to_json(
        orient="records", lines=True, force_ascii=False
    )
    return [line[5:-1] for line in text.split("\n")[: len(values)]]  # {"v":X} -> X


def doubles(column: pa.Array) -> pa.Array:
    """Each double as pandas' ``to_json`` writes it (``double_precision=10``); null where
    the value is null, NaN or infinite. The rule is in the module docstring."""
    v = column.to_numpy(zero_copy_only=False).astype(np.float64)
    finite = np.isfinite(v)
    a = np.where(finite, np.abs(v), 0.0)
    outside = (a > _FIXED_MAX) | ((a != 0) & (a < _FIXED_MIN))
    a[outside] = 0.0  # written by %.10g below; kept out of the uint64 casts
    whole = a.astype(np.uint64)
    scaled = (a - whole.astype(np.float64)) * _PLACES
    frac = scaled.astype(np.uint64)
    diff = scaled - frac.astype(np.float64)
    frac += (diff > 0.5) | ((diff == 0.5) & ((frac == 0) | (frac % 2 == 1)))
    carry = frac >= _PLACES
    frac[carry] = 0
    whole += carry
    digits = pc.utf8_rtrim(pc.utf8_lpad(pc.cast(pa.array(frac), pa.string()), 10, "0"), "0")
    digits = pc.if_else(pc.equal(digits, ""), "0", digits)
    sign = pc.if_else(pa.array(v < 0), "-", "")
    text = pc.binary_join_element_wise(sign, pc.cast(pa.array(whole), pa.string()), ".", digits, "")
    if outside.any():  # C's %.10g, which Python's % formatting matches
        rows = np.flatnonzero(outside)
        text = pc.replace_with_mask(
            text, pa.array(outside), pa.array([f"{x:.10g}" for x in v[rows]], pa.string())
        )
    return pc.if_else(pa.array(finite), text, pa.scalar(None, pa.string()))  # a null is NaN here
