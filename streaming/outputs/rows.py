"""The operator's rows as output rows, in Arrow on the driver (or in a Kafka writer).

The stateful operator emits one row per principal per batch (``OPERATOR_SCHEMA``):
its metrics row, carrying the batch's verdicts packed, ``d_`` + a decision column
(``columns.PACKED``: a numpy array's bytes per row; ``d_client`` a list of strings, or null).
:func:`output_rows` turns a table of them into ``OUTPUT_SCHEMA`` rows: a row whose
``d_producer_id`` holds ``n`` verdicts gives ``n`` decision rows (kind ``decision``, the
row's principal and quota, ``verdict`` ADMIT or THROTTLE from ``d_admitted``, the client's
columns split from ``d_client``, the other decision columns from their packed values, every
other column null), and the row itself stays, without its verdicts.

The decision rows come first, in row order and verdict order, then the rows
themselves: each principal's decisions still come before its metrics row. For
example, rows ``alice (d_producer_id: the bytes of [7, 8])`` and ``bob (null)`` give
``decision alice 7``, ``decision alice 8``, ``metric alice``, ``metric bob``.

A binary column's values lie end to end in one buffer, so a packed column's verdicts of
every row are that buffer read as their dtype (copied only where a collect's chunks are
combined, or null rows' slots emptied); each packed column must hold as many verdicts per
row as ``d_producer_id``, or the rows are refused. Doing this in the JVM
(``explode``) cost about 1.8 s per million decisions on the flood, almost all of it Spark
turning a million 28-column rows into Arrow for the driver's collect; here it is tens of
milliseconds.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pidquota.quota import ADMIT, THROTTLE
from pidquota.quota.client import SEP
from pidquota.streaming.columns import (
    CLIENT_COLUMNS,
    DECISION_ARRAYS,
    KIND_DECISION,
    PACKED,
    SEEN_ADDRESSES,
)

ARRAYS = tuple(DECISION_ARRAYS.values())  # the operator's columns beyond the output's
_OFFSET = {pa.binary(): np.int32, pa.large_binary(): np.int64}
_PER_PRINCIPAL = ("principal", "quota")  # a decision row takes these from its principal's row


def output_rows(table: pa.Table) -> pa.Table:
    """``table``'s operator rows as output rows (the module docstring); a table without the
    ``d_`` columns (output rows already) is returned as it is."""
    if ARRAYS[0] not in table.column_names:
        return table
    own = table.drop_columns([*ARRAYS, *([SEEN_ADDRESSES] if SEEN_ADDRESSES in table.column_names else [])])
    counts = _lengths(table[DECISION_ARRAYS["producer_id"]].combine_chunks(), PACKED["producer_id"])
    parent = pa.array(np.repeat(np.arange(len(counts), dtype=np.int64), counts))
    n = len(parent)
    clients = _split_clients(_client_column(table, counts))
    columns = []
    for field in own.schema:
        name = field.name
        if name in clients:
            made = clients[name].cast(field.type)  # a large string under Spark's large var types
        elif name == "kind":
            made = pa.repeat(pa.scalar(KIND_DECISION, field.type), n)
        elif name == "verdict":
            admitted = unpacked(_checked(table, "admitted", counts), PACKED["admitted"])
            made = pc.if_else(admitted, pa.scalar(ADMIT, field.type), pa.scalar(THROTTLE, field.type))
        elif name in PACKED and name != "admitted":  # a metrics count by that name is null
            made = unpacked(_checked(table, name, counts), PACKED[name]).cast(field.type)
        elif name in _PER_PRINCIPAL:
            made = pc.take(own[name], parent)
        else:
            made = pa.nulls(n, field.type)
        made = made.chunks if isinstance(made, pa.ChunkedArray) else [made]
        columns.append(pa.chunked_array([*made, *own[name].chunks], field.type))
    return pa.Table.from_arrays(columns, schema=own.schema)


def unpacked(column, dtype: str) -> pa.Array:
    """A packed decision column's verdicts of every row, end to end (a null row: none)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if column.null_count:  # a null's slot may hold bytes: none, here
        column = pc.fill_null(column, pa.scalar(b"", column.type))
    size = np.dtype(dtype).itemsize
    if not len(column):
        return pa.array(np.zeros(0, dtype))
    offsets = np.frombuffer(column.buffers()[1], _OFFSET[column.type])[
        column.offset : column.offset + len(column) + 1
    ]
    data = column.buffers()[2]
    if data is None or offsets[-1] == offsets[0]:
        return pa.array(np.zeros(0, dtype))
    if (offsets[-1] - offsets[0]) % size:
        raise ValueError(
            f"a packed decision column of {offsets[-1] - offsets[0]} bytes is not a whole number of {dtype}"
        )
    values = np.frombuffer(data, dtype, count=(offsets[-1] - offsets[0]) // size, offset=int(offsets[0]))
    return pa.array(values)


def _checked(table: pa.Table, name: str, counts: np.ndarray) -> pa.Array:
    """A packed decision column, once it is known to hold ``counts`` verdicts per row."""
    column = table[DECISION_ARRAYS[name]].combine_chunks()
    if not np.array_equal(_lengths(column, PACKED[name]), counts):
        raise ValueError(
            f"{DECISION_ARRAYS[name]} does not hold one {PACKED[name]} per verdict of d_producer_id in "
            "every row: these are not the operator's rows"
        )
    return column


def _lengths(column: pa.Array, dtype: str) -> np.ndarray:
    """Each row's number of verdicts in a packed column (0 for a null row)."""
    sizes = pc.fill_null(pc.binary_length(column), 0).to_numpy(zero_copy_only=False)
    return (sizes // np.dtype(dtype).itemsize).astype(np.int64)


def _client_column(table: pa.Table, counts: np.ndarray) -> pa.Array:
    """``d_client`` flattened in step with the verdicts: a row whose list is null (no client
    named), or not one per verdict (not the operator's own output) gives nulls."""
    total = int(counts.sum())
    joined = table[DECISION_ARRAYS["client"]].combine_chunks()
    if joined.null_count == len(joined):
        return pa.nulls(total, pa.string())
    given = pc.fill_null(pc.list_value_length(joined), -1).to_numpy(zero_copy_only=False)
    usable = given == counts
    starts = np.cumsum(np.where(usable, counts, 0)) - np.where(usable, counts, 0)  # in the flattened lists
    row = np.repeat(np.arange(len(counts)), counts)
    within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    flat = pc.list_flatten(joined.filter(pa.array(usable)))
    return pc.take(flat, pa.array(starts[row] + within, mask=~usable[row]))


def _split_clients(joined: pa.Array) -> dict[str, pa.Array]:
    """Joined client identities (``pidquota.quota.client``) as its columns; an empty field
    or a null identity is null."""
    if not len(joined) or joined.null_count == len(joined):
        return {name: pa.nulls(len(joined), pa.string()) for name in CLIENT_COLUMNS}
    parts = pc.split_pattern(pc.fill_null(joined, SEP * (len(CLIENT_COLUMNS) - 1)), SEP)
    out = {}
    for i, name in enumerate(CLIENT_COLUMNS):
        field = pc.list_element(parts, i)
        out[name] = pc.if_else(pc.equal(field, ""), pa.scalar(None, pa.string()), field)
    return out
