"""pidquota's JSON events (``--input-format events``): one flat JSON object per line, and
the fast path of reading them: certify plain events in Arrow and fold them, in one pass.

An event is one JSON object per produce request (or per granted PID):

================ ======== ======== =========================================
field            type     required meaning
================ ======== ======== =========================================
timestamp        int64    yes      request time at the broker, ms since epoch
principal        string   yes      the Kafka principal, e.g. ``User:alice``
producer_id      int64    yes      the PID; -1 (any negative) = not idempotent
producer_epoch   int16    no       the producer epoch (default -1)
client_id        string   no       the client.id
broker_id        int32    no       the broker that served the request
transactional_id string   no       the transactional.id, if any
topic            string   no       a topic of the request
partition        int32    no       a partition of the request
================ ======== ======== =========================================

Spark's strict parse (``formats/events_spark.py``) is exact but slow: every record
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

from pidquota.conf import jsontext
from pidquota.conf.formats import entry
from pidquota.formats.folded import FOLDED, as_binary, client_column, fold, folded_batch

# (name, type, required, inclusive range or None); type: "string", "int64" or "int32".
EVENT_FIELDS: tuple[tuple[str, str, bool, tuple[int, int] | None], ...] = (
    ("timestamp", "int64", True, (0, 253_402_300_799_999)),  # up to 9999-12-31
    ("principal", "string", True, None),
    ("producer_id", "int64", True, None),
    ("producer_epoch", "int32", False, (-1, 32_767)),
    ("client_id", "string", False, None),
    ("broker_id", "int32", False, (0, 2**31 - 1)),
    ("transactional_id", "string", False, None),
    ("topic", "string", False, None),
    ("partition", "int32", False, (0, 2**31 - 1)),
)

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
    [(name, pa.string() if t == "string" else pa.int64()) for name, t, _, _ in EVENT_FIELDS]
)
_BOUNDS = {name: bounds for name, _, _, bounds in EVENT_FIELDS if bounds}


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


def recognise(text: str) -> bool:
    """A line is an event when it is a JSON object with a ``principal`` or a ``producer_id``."""
    if not text.startswith("{"):
        return False
    try:
        value = jsontext.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and ("principal" in value or "producer_id" in value)


class Events:
    """The JSON event format (``pidquota.formats`` protocol): lines the screen cannot certify
    take Spark's strict parse (``events_spark.parse_events``), which names each dead letter."""

    entry = entry("events")
    reads = "lines"
    strict = "events_spark.parse_events"
    foreign = None
    recognise = staticmethod(recognise)

    def said(self, config) -> str:
        return ""

    def options(self, config) -> dict[str, str]:
        return {"inputFormat": self.entry.name}

    def screen(self, line_schema: pa.Schema, max_principal: int, options=None, broker_of=None) -> Screen:
        return Screen(as_binary(line_schema), max_principal)


FORMAT = Events()
