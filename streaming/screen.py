"""The fast path of parsing: certify plain events in Arrow and fold them, in one pass.

Spark's strict parse (``streaming/parse.py``) is exact but slow: every record
becomes a ``VARIANT`` and every field is checked with a dozen expressions.
Nearly every record in real traffic is a plain event, one flat object whose
values are integers and strings without escapes, so each micro-batch goes
through this screen first (``mapInArrow``, per input partition):

1. **Shape.** A record is a candidate when its bytes match ``_PLAIN``: it
   starts with ``{`` and ends with ``}``, holds no other brace or bracket, no
   backslash and no control character, is valid UTF-8, has no ``NaN`` or
   ``Inf`` value and is at most ``MAX_PLAIN_BYTES`` long. So it is one flat
   object, and each ``"`` delimits a string.
2. **Types.** The candidates are parsed together by Arrow's JSON reader with
   the event fields' types given (``unexpected_field_behavior="infer"``). It
   refuses what the strict parse refuses: a string where an integer belongs
   (``"5"``), a number where a string belongs, ``5.0``, ``1e2``, an integer
   beyond int64, a key written twice, and text that is not JSON. A block it
   refuses is halved until the refused records are isolated in blocks of at
   most ``LEAF_ROWS``, which go to the strict parse whole.
3. **Values.** A parsed record is certified when its required fields are
   present, its integers are within the fields' ranges, and its principal has
   a letter or digit of ASCII (so it is not blank) and fits the length limit.
4. **Fold.** Certified events are folded to one row per principal (its
   sightings' PIDs, timestamps and epochs as arrays), as
   ``streaming/compact.py`` does, with their newest timestamp (``max_ts``)
   for the watermark.

Everything not certified leaves with ``check = true`` and its original line
columns, and Spark's strict parse judges it: dead letters keep their exact
reasons, and a valid event that merely looks unusual (an escape, a nested
field, a BOM) is accepted there. The screen only decides which path a record
takes; it never rejects one. So both paths together give exactly the strict
parse's events, which a test checks over the fuzz corpus.

Worked example: of ``{"timestamp":1,"principal":"User:a","producer_id":7}``
(certified), ``{"timestamp":1,"principal":"User:a","producer_id":"7"}``
(Arrow refuses the string; the block is halved until that record is alone in
a leaf: strict parse, dead letter "field 'producer_id' must be an integer,
got "7"") and ``{"principal":"User:\\u0061",...}`` (a backslash: strict parse,
a valid event), one row is folded here and two go to Spark.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from pidquota.quota.client import COLUMNS as CLIENT_COLUMNS
from pidquota.quota.client import SEP
from pidquota.streaming.schema import EVENT_FIELDS

# Longer records go to the strict parse. Within 1000 bytes there is no room for what
# Spark's JSON parser refuses by length and Arrow's accepts: a number of 1000 digits, a
# key of 50,000 characters.
MAX_PLAIN_BYTES = 1000
LEAF_ROWS = 64  # a refused block is halved down to this many records
_PLAIN = r"^\{[^{}\[\]\\\x00-\x1f]*\}$"
# Arrow reads NaN, Inf and Infinity as numbers; Spark's parser refuses them (conservative:
# a string such as "User:Inf" also takes the strict parse).
_NON_FINITE = r"[:,]\s*-?(NaN|Inf)"
_ALNUM = "[0-9A-Za-z]"
_READ_SCHEMA = pa.schema(
    [(name, pa.string() if t.typeName() == "string" else pa.int64()) for name, t, _, _ in EVENT_FIELDS]
)
_BOUNDS = {name: bounds for name, _, _, bounds in EVENT_FIELDS if bounds}
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
    # A row the source judged itself (``streaming/request_log.py``): a dead letter's JSON
    # (raw, reason, source), or lines skipped per kind ({"skipped": {...}}); principal "".
    ("f_dead", pa.string()),
    ("check", pa.bool_()),
)


def _read(values: pa.Array) -> pa.Table | None:
    """Arrow's JSON reader over ``values`` (one object each), or None if it refuses
    the block or finds a different number of objects."""
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset : values.offset + n + 1]
    data = np.frombuffer(values.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    blob = np.insert(data, offsets[1:] - offsets[0], 10).tobytes()  # each record ends in a newline
    try:
        table = pj.read_json(
            io.BytesIO(blob),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(len(blob), 1 << 16) + 1),
            parse_options=pj.ParseOptions(explicit_schema=_READ_SCHEMA, unexpected_field_behavior="infer"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError):
        return None
    return table if table.num_rows == len(values) else None


def _read_all(values: pa.Array) -> tuple[list[pa.Table], np.ndarray]:
    """Parse ``values`` in blocks, halving refused ones; the parsed tables and the
    indices of the records they hold, in order."""
    tables, taken = [], []
    todo = [(0, len(values))]
    while todo:
        lo, hi = todo.pop()
        if hi <= lo:
            continue
        table = _read(values.slice(lo, hi - lo))
        if table is not None:
            tables.append(table.select(_READ_SCHEMA.names))
            taken.append(np.arange(lo, hi))
        elif hi - lo > LEAF_ROWS:
            mid = (lo + hi) // 2
            todo += [(mid, hi), (lo, mid)]
    idx = np.concatenate(taken) if taken else np.empty(0, dtype=np.int64)
    return tables, idx


def _candidates(values: pa.Array) -> np.ndarray:
    """Indices of the plain records (module docstring, step 1) that are valid UTF-8."""
    plain = pc.fill_null(pc.match_substring_regex(values, _PLAIN), False)
    plain = pc.and_(plain, pc.less_equal(pc.binary_length(values), MAX_PLAIN_BYTES))
    plain = pc.and_(plain, pc.invert(pc.fill_null(pc.match_substring_regex(values, _NON_FINITE), True)))
    idx = np.flatnonzero(plain.to_numpy(zero_copy_only=False))
    try:
        values.take(idx).cast(pa.string())  # Arrow checks UTF-8 here
    except pa.ArrowInvalid:  # rare: find the records that are not; the strict parse mends them
        good = []
        for i, v in zip(idx.tolist(), values.take(idx).to_pylist(), strict=True):
            try:
                v.decode("utf-8")
                good.append(i)
            except UnicodeDecodeError:
                pass
        idx = np.asarray(good, dtype=np.int64)
    return idx


def _certified(table: pa.Table, fallback: pa.Array | None, max_principal: int) -> tuple[pa.Array, pa.Array]:
    """Which parsed rows are plain valid events, and their timestamps (the record's
    own, or the Kafka record's when the event has none)."""
    ts = table["timestamp"]
    if fallback is not None:
        ts = pc.coalesce(ts, fallback)
    principal = table["principal"]
    ok = pc.and_(pc.is_valid(principal), pc.is_valid(table["producer_id"]))
    ok = pc.and_(ok, pc.is_valid(ts))
    ok = pc.and_(ok, pc.match_substring_regex(principal, _ALNUM))
    ok = pc.and_(ok, pc.less_equal(pc.utf8_length(principal), max_principal))
    for name, (low, high) in _BOUNDS.items():
        col = table[name]
        inside = pc.and_(pc.greater_equal(col, low), pc.less_equal(col, high))
        ok = pc.and_(ok, pc.or_kleene(pc.is_null(col), inside))
    return pc.fill_null(ok, False), ts


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


class Screen:
    """``mapInArrow`` function: line batches in (``value`` binary plus the source's
    columns), folded certified events and unchecked lines out (``schema``)."""

    def __init__(self, line_schema: pa.Schema, max_principal: int):
        self.line_schema = line_schema
        self.max_principal = max_principal
        self.fallback = "kafka_timestamp" in line_schema.names
        # nullable: a folded event's line columns are null, whatever the source declared (Spark's
        # text source declares _metadata.file_path NOT NULL, and its code would trust that)
        self.schema = pa.schema([*FOLDED, *(f.with_nullable(True) for f in line_schema)])

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        i = self.line_schema.get_field_index("value")
        for batch in batches:
            if batch.num_rows:
                if batch.schema.field(i).type != pa.binary():  # e.g. large_binary
                    batch = batch.set_column(i, "value", batch.column(i).cast(pa.binary()))
                yield from self.screen(batch)

    def screen(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        candidates = _candidates(batch.column("value"))
        values = batch.column("value")
        tables, idx = _read_all(values.take(candidates)) if len(candidates) else ([], np.empty(0, np.int64))
        rows = candidates[idx]
        certified = np.zeros(batch.num_rows, dtype=bool)
        if tables:
            table = pa.concat_tables(tables)
            fallback = batch.column("kafka_timestamp").take(rows) if self.fallback else None
            ok, ts = _certified(table, fallback, self.max_principal)
            mask = ok.to_numpy(zero_copy_only=False)
            certified[rows[mask]] = True
            events = pa.table(
                {
                    "principal": table["principal"],
                    "producer_id": table["producer_id"],
                    "timestamp": ts,
                    "producer_epoch": pc.cast(pc.fill_null(table["producer_epoch"], -1), pa.int32()),
                    "client": client_column(table, plain=True),
                }
            ).filter(ok)
            if events.num_rows:
                yield folded_batch(fold(events), self.schema)
        rest = np.flatnonzero(~certified)
        if len(rest):
            yield self._unchecked(batch.take(rest))

    def _unchecked(self, lines: pa.RecordBatch) -> pa.RecordBatch:
        n = lines.num_rows
        cols = [pa.nulls(n, t) for _, t in FOLDED[:-1]] + [pa.array(np.ones(n, dtype=bool))]
        cols += [lines.column(f.name) for f in self.line_schema]
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)
