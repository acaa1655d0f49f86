"""What every format's screen yields: a principal's sightings folded into one row, or a row
the format judged itself, in one Arrow schema (:data:`FOLDED`, then the transport's line
columns).

A screen turns a batch of lines into a few rows: each principal's certified sightings
folded (:func:`fold`: its PIDs, timestamps and epochs as arrays in step, the clients of the
PIDs that name one, the newest timestamp for the watermark), the dead letters and skipped
counts the format judged itself (:func:`judged_batch`, principal ``""``), and the lines it
leaves to its strict parse in Spark (``check`` true, their line columns as they came).

Worked example: the sightings (User:a, PID 7, t 10), (User:a, PID 8, t 12) and (User:b,
PID 9, t 11) fold to two rows, ``("User:a", [7, 8], [10, 12], [-1, -1], ..., max_ts 12)``
and ``("User:b", [9], [11], [-1], ..., max_ts 11)``, whatever order they came in.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pidquota.quota.client import COLUMNS as CLIENT_COLUMNS
from pidquota.quota.client import SEP

KIND_EVENT, KIND_DEAD = "E", "D"  # what a strict parse made of a record
FOLDED = (
    ("f_principal", pa.string()),
    ("f_producer_ids", pa.list_(pa.int64())),
    ("f_timestamps", pa.list_(pa.int64())),
    ("f_epochs", pa.list_(pa.int32())),
    # The clients of the sightings that name one (``pidquota.quota.client``): each PID once,
    # with its joined identity, in step. Null when no sighting names a client.
    ("f_client_pids", pa.list_(pa.int64())),
    ("f_clients", pa.list_(pa.string())),
    ("f_max_ts", pa.int64()),
    # A row the format's screen judged itself (``formats/request_log.py``): a dead letter's JSON
    # (raw, reason, source), or lines skipped per kind ({"skipped": {...}}); principal "".
    ("f_dead", pa.string()),
    ("check", pa.bool_()),
)


def client_column(table: pa.Table, plain: bool = False) -> pa.Array:
    """Each row's client identity joined into one string (``pidquota.quota.client``), from
    whichever of its columns ``table`` has (``broker_id`` stands for ``broker``); null
    where none is known. ``plain``: the values hold no control character (the screen's
    certified records), so none holds the separator either."""
    n = table.num_rows
    parts, known = [], pa.array(np.zeros(n, dtype=bool))
    for name in CLIENT_COLUMNS:
        source = "broker_id" if name == "broker" and "broker_id" in table.column_names else name
        if source not in table.column_names:
            parts.append(pa.repeat(pa.scalar("", pa.string()), n))
            continue
        col = pc.cast(table[source], pa.string())
        known = pc.or_(known, pc.fill_null(pc.not_equal(col, ""), False))
        parts.append(pc.fill_null(col if plain else pc.replace_substring(col, SEP, " "), ""))  # never splits
    joined = pc.binary_join_element_wise(*parts, SEP)
    return pc.if_else(known, joined, pa.scalar(None, pa.string()))


def sightings_schema(*clients: str) -> pa.Schema:
    """A screen's sightings before :func:`fold`: principal, producer_id, timestamp,
    producer_epoch, then the client fields it knows (of ``pidquota.quota.client.COLUMNS``),
    which :func:`client_column` joins."""
    base = [("principal", pa.string()), ("producer_id", pa.int64()), ("timestamp", pa.int64())]
    return pa.schema([*base, ("producer_epoch", pa.int32()), *((name, pa.string()) for name in clients)])


def fold(events: pa.Table) -> pa.Table:
    """One row per principal: its sightings' PIDs, timestamps and epochs (in step), and
    the newest timestamp. A batch's rows then cost per principal, not per event, on
    their way through Spark's shuffle and into the stateful operator's pandas.

    With a ``client`` column (a joined identity), each PID that has one is listed once
    more, in ``client_pids`` with its identity in ``clients``: the least identity among its
    sightings, so any split of the batch into partitions agrees."""
    folded = events.group_by(["principal"], use_threads=False).aggregate(
        [("producer_id", "list"), ("timestamp", "list"), ("producer_epoch", "list"), ("timestamp", "max")]
    )
    named = events.filter(pc.is_valid(events["client"])) if "client" in events.column_names else None
    if named is None or not named.num_rows:
        n = folded.num_rows
        return folded.append_column("client_pids", pa.nulls(n, pa.list_(pa.int64()))).append_column(
            "clients", pa.nulls(n, pa.list_(pa.string()))
        )
    # The least identity per PID, by each identity's rank in the batch's sorted dictionary:
    # a minimum over integers, not strings (the identities are few, the sightings many).
    encoded = pc.dictionary_encode(named["client"].combine_chunks())
    order = pc.array_sort_indices(encoded.dictionary).to_numpy()
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    ranked = named.select(["principal", "producer_id"]).append_column(
        "rank", pa.array(rank[encoded.indices.to_numpy(zero_copy_only=False)])
    )
    per_pid = ranked.group_by(["principal", "producer_id"], use_threads=False).aggregate([("rank", "min")])
    lists = per_pid.group_by(["principal"], use_threads=False).aggregate(
        [("producer_id", "list"), ("rank_min", "list")]
    )
    ranks = lists["rank_min_list"].combine_chunks()
    clients = pa.ListArray.from_arrays(
        ranks.offsets, encoded.dictionary.take(pa.array(order)).take(ranks.values)
    )
    at = pc.index_in(folded["principal"], lists["principal"])  # Acero's join takes no list columns
    return folded.append_column("client_pids", pc.take(lists["producer_id_list"], at)).append_column(
        "clients", pc.take(clients, at)
    )


def folded_batch(folded: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    """Folded events (:func:`fold`) as screened rows of ``schema`` (the line columns null)."""
    n = folded.num_rows
    cols = [
        folded["principal"],
        folded["producer_id_list"],
        folded["timestamp_list"],
        folded["producer_epoch_list"],
        folded["client_pids"],
        folded["clients"],
        folded["timestamp_max"],
        pa.nulls(n, pa.string()),
        pa.array(np.zeros(n, dtype=bool)),
    ]
    cols = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols]
    cols = [c.cast(t) for c, (_, t) in zip(cols, FOLDED, strict=True)]
    cols += [pa.nulls(n, f.type) for f in schema][len(cols) :]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def judged_batch(dead: list[str], schema: pa.Schema) -> pa.RecordBatch:
    """Rows the source judged itself (``f_dead`` JSON texts), principal "" and nothing to check."""
    n = len(dead)
    cols = [pa.array([""] * n, pa.string())] + [pa.nulls(n, t) for _, t in FOLDED[1:-2]]
    cols += [pa.array(dead, pa.string()), pa.array(np.zeros(n, dtype=bool))]
    cols += [pa.nulls(n, f.type) for f in schema][len(cols) :]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def screened_rows(
    events: list[dict], clients: tuple[str, ...], letters: list[str], skipped, schema: pa.Schema
):
    """A screen's rows for one batch: its sightings (dicts of :func:`sightings_schema` with
    ``clients``) folded, then its dead letters (JSON texts) and its skipped lines per kind."""
    if events:
        table = pa.Table.from_pylist(events, schema=sightings_schema(*clients))
        yield folded_batch(fold(table.append_column("client", client_column(table))), schema)
    if skipped:
        letters = [*letters, json.dumps({"skipped": dict(sorted(skipped.items()))})]
    if letters:
        yield judged_batch(letters, schema)


# A source option: screen the lines in the source itself, with this principal length
# limit. The lines then never cross to the JVM and back to Python for the screen:
# only the folded rows and the unchecked lines do.
OPTION = "screenMaxPrincipal"


def screen_limit(options) -> int | None:
    """The source option's principal length limit, or None: the source yields lines."""
    value = options.get(OPTION) or options.get(OPTION.lower())
    return int(value) if value else None


def as_binary(schema: pa.Schema) -> pa.Schema:
    """A line schema with ``value`` as binary, as the screen takes it."""
    return schema.set(schema.get_field_index("value"), pa.field("value", pa.binary()))


def screened_schema(line_schema: pa.Schema) -> pa.Schema:
    """What a screening source yields: the folded columns, then the line columns."""
    return pa.schema([*FOLDED, *as_binary(line_schema)])


def principal_problem(principal: str, max_principal: int) -> str | None:
    """Why a principal a format read cannot be one, as its dead letter says, or None."""
    if not principal.strip() or not re.search(r"[^\s\x00-\x1f]", principal):
        return "principal is empty (only white space or control characters)"
    if len(principal) > max_principal:
        return f"principal is longer than {max_principal} characters"
    return None


class PerRow:
    """A batch's per-line facts, computed only for the lines that are asked about (inits and
    dead letters): the noise, nearly every line, never costs a Python call."""

    def __init__(self, n: int, at):
        self.n, self.at = n, at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return self.at(i)


def sources_of(batch: pa.RecordBatch) -> PerRow:
    """Each line's position, for its dead letter: Kafka topic/partition@offset, or the file."""
    names = batch.schema.names
    if "kafka_offset" in names:
        t, p, o = (batch.column(c) for c in ("kafka_topic", "kafka_partition", "kafka_offset"))
        return PerRow(batch.num_rows, lambda i: f"{t[i].as_py()}/{p[i].as_py()}@{o[i].as_py()}")
    if "source_file" in names:
        files = batch.column("source_file")
        return PerRow(batch.num_rows, lambda i: files[i].as_py())
    return PerRow(batch.num_rows, lambda i: None)
