"""Fold a micro-batch's events into one row per principal before the shuffle.

Spark's stateful pandas operator costs per row: every row is shuffled,
serialised to the Python worker and turned into pandas. So each input
partition first folds its events (in Arrow, vectorised: ``Table.group_by``)
into one row per principal carrying its sightings' PIDs, timestamps and
epochs as arrays (in step), its PIDs' clients (each PID once), and its newest
timestamp (for the watermark).
The operator unfolds them again, so the core sees exactly the same
sightings and decides exactly the same; only the transport shrinks.
Dead letters pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pidquota.formats.folded import fold
from pidquota.streaming.columns import DEAD_PRINCIPAL

COMPACT_SCHEMA = (
    "principal string, producer_ids array<long>, timestamps array<long>, epochs array<int>, "
    "client_pids array<long>, clients array<string>, dead string, max_ts long"
)
_OUT = pa.schema(
    [
        ("principal", pa.string()),
        ("producer_ids", pa.list_(pa.int64())),
        ("timestamps", pa.list_(pa.int64())),
        ("epochs", pa.list_(pa.int32())),
        ("client_pids", pa.list_(pa.int64())),
        ("clients", pa.list_(pa.string())),
        ("dead", pa.string()),
        ("max_ts", pa.int64()),
    ]
)


def compact(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: (principal, producer_id, producer_epoch, timestamp, client, dead) in."""
    for batch in batches:
        table = pa.Table.from_batches([batch])
        is_dead = pc.equal(table["principal"], DEAD_PRINCIPAL)
        dead = table.filter(is_dead)
        if dead.num_rows:
            n = dead.num_rows
            yield pa.RecordBatch.from_arrays(
                [
                    dead["principal"].combine_chunks(),
                    pa.nulls(n, pa.list_(pa.int64())),
                    pa.nulls(n, pa.list_(pa.int64())),
                    pa.nulls(n, pa.list_(pa.int32())),
                    pa.nulls(n, pa.list_(pa.int64())),
                    pa.nulls(n, pa.list_(pa.string())),
                    dead["dead"].combine_chunks(),
                    pa.nulls(n, pa.int64()),
                ],
                schema=_OUT,
            )
        events = table.filter(pc.invert(is_dead))
        if not events.num_rows:
            continue
        folded = fold(events)
        n = folded.num_rows
        yield pa.RecordBatch.from_arrays(
            [
                folded["principal"].combine_chunks(),
                folded["producer_id_list"].combine_chunks(),
                folded["timestamp_list"].combine_chunks().cast(pa.list_(pa.int64())),
                folded["producer_epoch_list"].combine_chunks().cast(pa.list_(pa.int32())),
                folded["client_pids"].combine_chunks().cast(pa.list_(pa.int64())),
                folded["clients"].combine_chunks().cast(pa.list_(pa.string())),
                pa.nulls(n, pa.string()),
                folded["timestamp_max"].combine_chunks(),
            ],
            schema=_OUT,
        )
