"""The operator's rows as output rows, in Arrow on the driver (or in a Kafka writer).

The stateful operator emits one row per principal per batch (``OPERATOR_SCHEMA``):
its metrics row, carrying the batch's verdicts as arrays, ``d_`` + a decision
column. :func:`output_rows` turns a table of them into ``OUTPUT_SCHEMA`` rows: a
row whose ``d_producer_id`` holds ``n`` verdicts gives ``n`` decision rows (kind
``decision``, the row's principal and quota, ``verdict`` ADMIT or THROTTLE from
``d_admitted``, the other decision columns from their arrays, every other column
null), and the row itself stays, without its arrays.

The decision rows come first, in row order and array order, then the rows
themselves: each principal's decisions still come before its metrics row. For
example, rows ``alice (d_producer_id [7, 8])`` and ``bob (null)`` give ``decision
alice 7``, ``decision alice 8``, ``metric alice``, ``metric bob``.

Doing this in the JVM (``explode``) cost about 1.8 s per million decisions on the
flood, almost all of it Spark turning a million 28-column rows into Arrow for the
driver's collect; here it is a few list flattens and takes, tens of milliseconds.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from pidquota.quota import ADMIT, THROTTLE
from pidquota.streaming.columns import DECISION_ARRAYS, DECISION_FIELDS, KIND_DECISION

ARRAYS = tuple(DECISION_ARRAYS.values())  # the operator's columns beyond the output's
_PER_PRINCIPAL = ("principal", "quota")  # a decision row takes these from its principal's row


def output_rows(table: pa.Table) -> pa.Table:
    """``table``'s operator rows as output rows (the module docstring); a table without the
    ``d_`` arrays (output rows already) is returned as it is."""
    if ARRAYS[0] not in table.column_names:
        return table
    own = table.drop_columns(list(ARRAYS))
    ids = table[DECISION_ARRAYS["producer_id"]].combine_chunks()
    parent = pc.list_parent_indices(ids)
    n = len(parent)
    columns = []
    for field in own.schema:
        name = field.name
        if name == "kind":
            made = pa.repeat(pa.scalar(KIND_DECISION, field.type), n)
        elif name == "verdict":
            admitted = pc.list_flatten(table[DECISION_ARRAYS["admitted"]].combine_chunks())
            made = pc.if_else(admitted, pa.scalar(ADMIT, field.type), pa.scalar(THROTTLE, field.type))
        elif name in DECISION_FIELDS and name != "admitted":  # a metrics count by that name is null
            made = pc.list_flatten(table[DECISION_ARRAYS[name]].combine_chunks()).cast(field.type)
        elif name in _PER_PRINCIPAL:
            made = pc.take(own[name], parent)
        else:
            made = pa.nulls(n, field.type)
        made = made.chunks if isinstance(made, pa.ChunkedArray) else [made]
        columns.append(pa.chunked_array([*made, *own[name].chunks], field.type))
    return pa.Table.from_arrays(columns, schema=own.schema)
