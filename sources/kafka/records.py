"""Kafka record batches decoded straight into Arrow, with numpy: a Python loop only hops
from record to record by their lengths; the other fields, the range filter and the gather of
the values into one Arrow string column are vectorised. No Python object is made per record,
and no CRC is checked (the broker checks it when the batch is produced).

The rows are the Kafka source's schema, :data:`SCHEMA` (value, kafka_topic, kafka_partition,
kafka_offset, kafka_timestamp). Control batches (transaction markers) are skipped.

Record batch format (magic 2)
-----------------------------
A Fetch response holds, per partition, record batches one after another. A
batch with base offset 40 and two records, ``"hi"`` (no key) at 40 and a null
value with key ``k`` and one header at 41, 5 ms later::

    00 00 00 00 00 00 00 28   baseOffset 40
    00 00 00 46               batchLength 70 (the bytes after this field)
    00 00 00 00               partitionLeaderEpoch
    02                        magic 2 (0 and 1: legacy message sets, decoded by kafka-python)
    99 f7 6a 3e               CRC-32C (not checked)
    00 00                     attributes: bits 0-2 codec (none, gzip, snappy, lz4, zstd),
                              bit 3 LogAppendTime, bit 4 transactional, bit 5 control
    00 00 00 01               lastOffsetDelta 1: the batch ends at 41, whatever its
                              records are (control batches, compacted-away records)
    00 00 01 9b 76 da a8 00   baseTimestamp 1767225600000
    00 00 01 9b 76 da a8 05   maxTimestamp (every record's timestamp under LogAppendTime)
    ff ff ff ff ff ff ff ff   producerId, then producerEpoch (ff ff), baseSequence (ff ff ff ff)
    00 00 00 02               recordCount 2, then the records (compressed as one block if a codec is set)

Each record is zigzag varints (1 -> 02, -1 -> 01) and bytes::

    10 | 00 | 00 | 00 | 01 | 04 68 69 | 00
    length 8, attributes, timestampDelta 0, offsetDelta 0, key -1 (null),
    value 2 "hi", 0 headers
    16 | 00 | 0a | 02 | 02 6b | 01 | 02 02 68 02 76
    length 11, attributes, timestampDelta 5, offsetDelta 1, key 1 "k",
    value -1 (null), 1 header ("h": "v")

So record 41 is (value None, offset 40 + 1, timestamp 1767225600000 + 5). The
next fetch starts at baseOffset + lastOffsetDelta + 1 = 42. The last batch of a
response may be cut short by the fetch size: it is left for the next fetch.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from kafka import errors

from pidquota.store.kafka import KafkaError

SCHEMA = "value string, kafka_topic string, kafka_partition int, kafka_offset long, kafka_timestamp long"
ARROW = pa.schema(
    [
        ("value", pa.string()),
        ("kafka_topic", pa.string()),
        ("kafka_partition", pa.int32()),
        ("kafka_offset", pa.int64()),
        ("kafka_timestamp", pa.int64()),
    ]
)
BATCH_ROWS = 10_000  # rows per Arrow batch handed to Spark
CONTROL, TRANSACTIONAL = 0x20, 0x10  # attribute bits (Kafka's; the log audit's format knows CONTROL too)
_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte record batch header, as above
_CODECS = {1: ("gzip", None), 2: ("snappy", "python-snappy"), 3: ("lz4", "lz4"), 4: ("zstd", "zstandard")}
# The least batch length (the bytes after the length field) per magic: magic 2's header, a
# legacy message's crc, magic, attributes, (timestamp,) key length and value length.
_MIN_LENGTH = {0: 14, 1: 22, 2: _HEADER.size - 12}
# What damaged bytes raise in the decoders below and in kafka-python's legacy decoder.
_DAMAGE = (struct.error, IndexError, ValueError, OSError, EOFError, TypeError, OverflowError)


def corrupt(where: str, offset: int, why: str) -> KafkaError:
    """The one error for damaged record bytes: it names the topic-partition and offset."""
    return KafkaError(
        f"a record batch of {where or 'the response'} at offset {offset} is corrupt ({why}); the "
        "broker's log or its response is damaged there: kafka-dump-log.sh (DumpLogSegments) shows "
        "the segment, and a --starting-offsets past it reads on"
    )


def _batch_at(records: bytes, pos: int, where: str) -> tuple[int, int, int]:
    """(base offset, the position after the batch, magic) of the batch at ``pos``: raises
    :func:`corrupt` for a length or magic that no broker writes."""
    base, length, _, magic = struct.unpack_from(">qiib", records, pos)
    if magic not in _MIN_LENGTH or length < _MIN_LENGTH[magic]:
        raise corrupt(where, base, f"length {length}, magic {magic}")
    return base, pos + 12 + length, magic


@dataclass
class Decoded:
    """The rows of one Fetch response in [start, end), and the offset to fetch next."""

    values: list[pa.Array] = field(default_factory=list)  # string chunks
    offsets: list[np.ndarray] = field(default_factory=list)
    timestamps: list[pa.Array] = field(default_factory=list)  # null for magic 0 (no timestamps)
    next_offset: int = 0
    complete_batches: int = 0  # 0 with records bytes present: one batch larger than the fetch

    @property
    def rows(self) -> int:
        return sum(len(o) for o in self.offsets)


@dataclass
class _Run:
    """Consecutive magic-2 batches: their record bytes joined, and per-batch facts."""

    chunks: list = field(default_factory=list)
    counts: list = field(default_factory=list)
    base_offsets: list = field(default_factory=list)
    base_timestamps: list = field(default_factory=list)
    log_append: list = field(default_factory=list)


@dataclass
class Walk:
    """A Fetch response's complete batches that may hold rows in [start, end), found from
    their headers alone (cheap), and the offset after them: enough to send the next Fetch
    before the records are decoded."""

    records: bytes
    start: int
    end: int
    spans: list[tuple[int, int, int]] = field(default_factory=list)  # (position, stop, magic)
    next_offset: int = 0
    complete_batches: int = 0  # 0 with records bytes present: one batch larger than the fetch


def walk(records: bytes, start: int, end: int, aborted: dict | None = None, where: str = "") -> Walk:
    """The batches of ``records`` to decode for [start, end). ``next_offset`` is past every
    complete batch (control batches and compaction gaps included), or ``start``. Transactional
    batches of the ``aborted`` transactions (:func:`by_producer`, see ``transactions.py``) are
    left out, as a read_committed consumer drops them. A batch whose length or magic no
    broker writes raises :func:`corrupt` (``where`` names the topic-partition)."""
    out, pos, size = Walk(records, start, end, next_offset=start), 0, len(records)
    while pos + 17 <= size:  # offset, length, then the magic byte, in both formats
        base, stop, magic = _batch_at(records, pos, where)
        if stop > size or (magic >= 2 and base >= end):
            break  # a batch cut short by the fetch size, or past the range
        out.complete_batches += 1
        last, rows = base, True  # a legacy entry's offset is its last (inner) offset: always decoded
        if magic >= 2:
            attrs, last_delta = struct.unpack_from(">hi", records, pos + 21)
            last = base + last_delta
            count = struct.unpack_from(">i", records, pos + 57)[0]
            rows = not attrs & CONTROL and count > 0 and last >= out.next_offset  # not a marker, nor empty
            if rows and aborted and attrs & TRANSACTIONAL:
                rows = not in_aborted(aborted, struct.unpack_from(">q", records, pos + 43)[0], base)
        if rows:
            out.spans.append((pos, stop, magic))
        out.next_offset = max(out.next_offset, last + 1)
        pos = stop
    return out


def by_producer(aborted) -> dict[int, list[tuple[int, int]]]:
    """Aborted transactions, each (producer id, first offset, marker offset), by producer."""
    out: dict[int, list[tuple[int, int]]] = {}
    for pid, first, marker in aborted:
        out.setdefault(pid, []).append((first, marker))
    return out


def in_aborted(aborted: dict, producer_id: int, offset: int) -> bool:
    """Whether a transactional batch of ``producer_id`` at ``offset`` is in one of its
    ``aborted`` transactions (:func:`by_producer`)."""
    return any(first <= offset < marker for first, marker in aborted.get(producer_id, ()))


HEADERS = pa.schema(
    [
        ("producer_id", pa.int64()),
        ("producer_epoch", pa.int32()),
        ("timestamp", pa.int64()),  # the batch's maxTimestamp: its last record's (or append) time
        ("attributes", pa.int16()),
        ("magic", pa.int8()),
        ("kafka_offset", pa.int64()),  # the batch's base offset
        ("records", pa.int32()),
    ]
)


def batch_headers(batches: Walk) -> pa.RecordBatch:
    """One row per complete batch whose base offset is in [start, end) of a walked Fetch
    response, read from its 61-byte header alone: no record is decoded and nothing is
    decompressed. Control batches are rows too (``attributes`` says so). A legacy message
    set (magic 0 or 1) has no producer id: -1. A Python loop only hops from batch to batch;
    the fields are gathered with numpy."""
    records, start, end = batches.records, batches.start, batches.end
    at = np.asarray(batch_positions(records, end), np.int64)
    if len(at) and at[-1] + _HEADER.size > len(records):  # a short legacy message last: read zeros past it
        records = bytes(records) + bytes(_HEADER.size)
    buf = np.frombuffer(records, np.uint8)

    def field(offset: int, dtype: str) -> np.ndarray:
        width = np.dtype(dtype).itemsize
        if not len(at):
            return np.empty(0, dtype)
        return buf[at[:, None] + offset + np.arange(width)].copy().view(dtype).ravel()

    base, length, magic = field(0, ">i8"), field(8, ">i4"), buf[at + 16] if len(at) else np.empty(0, np.uint8)
    modern = (magic >= 2) & (length >= _HEADER.size - 12)
    legacy = lambda values, empty: np.where(modern, values, empty)  # noqa: E731
    keep = (base >= start) & (base < end)
    columns = [
        legacy(field(43, ">i8"), -1),
        legacy(field(51, ">i2"), -1),
        legacy(field(35, ">i8"), -1),
        legacy(field(21, ">i2"), 0),
        magic.astype(np.int8),
        base,
        legacy(field(57, ">i4"), 1),
    ]
    dtypes = (np.int64, np.int32, np.int64, np.int16, np.int8, np.int64, np.int32)
    return pa.RecordBatch.from_arrays(
        [pa.array(c[keep].astype(t), f.type) for c, t, f in zip(columns, dtypes, HEADERS, strict=True)],
        schema=HEADERS,
    )


def batch_positions(records: bytes, end: int) -> list[int]:
    """Where each complete batch of a response starts, up to the first past ``end``."""
    out, pos, size = [], 0, len(records)
    while pos + 17 <= size:
        base, stop, magic = _batch_at(records, pos, "")
        if stop > size or (magic >= 2 and base >= end):
            break
        out.append(pos)
        pos = stop
    return out


def decode_rows(batches: Walk, where: str = "") -> Decoded:
    """The rows with start <= offset < end of the walked batches; ``where`` names the
    topic-partition in errors."""
    start, end = batches.start, batches.end
    out = Decoded(next_offset=batches.next_offset, complete_batches=batches.complete_batches)
    run, view = _Run(), memoryview(batches.records)
    for pos, stop, magic in batches.spans:
        if magic < 2:
            _flush(run, out, start, end, where)
            run = _Run()
            try:
                _legacy(view[pos:stop], out, start, end)
            except (*_DAMAGE, errors.KafkaError) as exc:  # kafka-python's CorruptRecordError
                raise corrupt(where, struct.unpack_from(">q", view, pos)[0], type(exc).__name__) from None
        else:
            _add_batch(view, pos, stop, run, where)
    _flush(run, out, start, end, where)
    return out


def decode(records: bytes, start: int, end: int, where: str = "") -> Decoded:
    """Decode a Fetch response's ``records`` bytes: the rows with start <= offset < end."""
    return decode_rows(walk(records, start, end), where)


def _add_batch(view: memoryview, pos: int, stop: int, run: _Run, where: str) -> None:
    """Add one magic-2 batch's records (decompressed) and facts to ``run``."""
    base, _, _, _, _, attrs, _, base_ts, max_ts, _, _, _, count = _HEADER.unpack_from(view, pos)
    chunk = view[pos + _HEADER.size : stop]
    if attrs & 0x07:
        chunk = _decompress(attrs & 0x07, chunk, f"{where} offset {base}")
    run.chunks.append(chunk)
    run.counts.append(count)
    run.base_offsets.append(base)
    run.base_timestamps.append(max_ts if attrs & 0x08 else base_ts)
    run.log_append.append(bool(attrs & 0x08))


def _decompress(codec: int, chunk: memoryview, where: str) -> bytes:
    from kafka import codec as kc

    name, package = _CODECS.get(codec, (f"codec {codec}", None))
    if package is None and codec != 1:
        raise KafkaError(f"the record batch at {where} uses an unknown compression codec {codec}")
    if not getattr(kc, f"has_{name}")():
        raise KafkaError(
            f"the record batch at {where} is compressed with {name}, and its Python library "
            f"is not installed: pip install {package}"
        )
    try:
        if codec == 1:
            return kc.gzip_decode(chunk)
        return getattr(kc, f"{name}_decode")(chunk.tobytes())
    except Exception as exc:  # each codec's library fails damaged bytes its own way
        raise KafkaError(
            f"the record batch at {where} is corrupt: its {name} block does not unpack ({exc})"
        ) from None


def _legacy(entry: memoryview, out: Decoded, start: int, end: int) -> None:
    """A magic 0/1 message set entry, through kafka-python's decoder (old brokers only)."""
    from kafka.record import MemoryRecords

    rows = [
        (r.offset, r.timestamp, r.value)
        for batch in _batches(MemoryRecords(entry.tobytes()))
        for r in batch
        if start <= r.offset < end
    ]
    if rows:
        out.offsets.append(np.array([r[0] for r in rows], np.int64))
        out.timestamps.append(pa.array([r[1] for r in rows], pa.int64()))
        out.values.append(_strings(pa.array([r[2] for r in rows], pa.binary())))


def _batches(records) -> Iterator:
    while (batch := records.next_batch()) is not None:
        yield batch


def _flush(run: _Run, out: Decoded, start: int, end: int, where: str) -> None:
    """Decode a run of magic-2 batches in one go and append its rows in [start, end)."""
    if not run.chunks:
        return
    buf = b"".join([*run.chunks, bytes(16)])  # padded: a varint read never runs off the end
    try:
        bodies, ends = _record_bodies(buf, run)
        arr = np.frombuffer(buf, np.uint8)
        counts = np.asarray(run.counts)
        ts_delta, pos = _varints(arr, bodies + 1)  # after the attributes byte
        off_delta, pos = _varints(arr, pos)
        key_len, pos = _varints(arr, pos)
        val_len, val_start = _varints(arr, pos + np.maximum(key_len, 0))
    except _DAMAGE as exc:
        raise corrupt(where, run.base_offsets[0], type(exc).__name__) from None
    if ((key_len < -1) | (val_len < -1) | (val_start > ends) | (val_len > ends - val_start)).any():
        raise corrupt(where, run.base_offsets[0], "a record's key or value runs past the record")
    offsets = np.repeat(np.asarray(run.base_offsets, np.int64), counts) + off_delta
    ts_delta[np.repeat(np.asarray(run.log_append), counts)] = 0
    timestamps = np.repeat(np.asarray(run.base_timestamps, np.int64), counts) + ts_delta
    keep = np.flatnonzero((offsets >= start) & (offsets < end))
    if len(keep):
        out.offsets.append(offsets[keep])
        out.timestamps.append(pa.array(timestamps[keep], pa.int64()))
        out.values.append(_gather(buf, val_start[keep], val_len[keep]))


def _record_bodies(buf: bytes, run: _Run) -> tuple[np.ndarray, np.ndarray]:
    """Where each record's body starts (after its length varint), and where its batch's
    records end (no value may be read past it): the one per-record Python loop. A length is never negative, so its zigzag varint is
    decoded as ``raw >> 1``. Raises ``IndexError`` when the records do not fill their batch."""
    starts, ends, pos = [], [], 0
    add = starts.append
    for chunk, count in zip(run.chunks, run.counts, strict=True):
        stop = pos + len(chunk)
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:  # 1 byte: records up to 63 bytes
                pos += 1
                add(pos)
                pos += b >> 1
            elif (c := buf[pos + 1]) < 0x80:  # 2 bytes: up to 8 KiB
                pos += 2
                add(pos)
                pos += ((b & 0x7F) | (c << 7)) >> 1
            else:
                raw, pos = varint(buf, pos)
                add(pos)
                pos += raw >> 1
        if pos != stop or count < 0:
            raise IndexError("records do not fill their batch")
        ends += [stop] * count
    return np.array(starts, np.int64), np.array(ends, np.int64)


def varint(buf, pos: int) -> tuple[int, int]:
    """One unsigned varint at ``pos`` (the raw value, before zigzag) and the position after it."""
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos


def _varints(arr: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at each of ``pos``: (values, positions after them). Up to 3 bytes
    vectorised (values below 2**20); longer ones, rare, one by one."""
    b0, b1, b2 = (arr[pos + i].astype(np.int64) for i in range(3))
    more0, more1 = b0 >= 0x80, (b0 >= 0x80) & (b1 >= 0x80)
    raw = (b0 & 0x7F) | np.where(more0, (b1 & 0x7F) << 7, 0) | np.where(more1, (b2 & 0x7F) << 14, 0)
    after = pos + 1 + more0 + more1
    values = (raw >> 1) ^ -(raw & 1)
    for i in np.flatnonzero(more1 & (b2 >= 0x80)):
        n, after[i] = varint(arr.data, int(pos[i]))
        values[i] = (n >> 1) ^ -(n & 1)
    return values, after


def _gather(buf: bytes, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The values as one string column, copied out of ``buf`` by Arrow.

    ``buf`` is viewed as a binary array whose even elements are the values and
    odd ones the bytes between them (their offsets are start, end, start, end...);
    ``take`` of the even ones copies the values into a contiguous column.
    """
    n = len(starts)
    bounds = np.empty(2 * n, np.int64)
    bounds[0::2] = starts
    bounds[1::2] = starts + np.maximum(lengths, 0)
    valid = np.ones(2 * n - 1, bool)
    valid[0::2] = lengths >= 0  # a null value has length -1
    nulls = int(n - valid[0::2].sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    spans = pa.Array.from_buffers(
        pa.large_binary(), 2 * n - 1, [bitmap, pa.py_buffer(bounds), pa.py_buffer(buf)], null_count=nulls
    )
    return _strings(spans.take(pa.array(np.arange(0, 2 * n, 2))))


def _strings(values: pa.Array) -> pa.Array:
    """Binary values as UTF-8 strings; invalid UTF-8 replaced with U+FFFD, as
    ``bytes.decode("utf-8", "replace")`` does."""
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [None if v is None else v.decode("utf-8", "replace") for v in values.to_pylist()], pa.string()
        )


def arrow_batches(decoded: Decoded, topic: str, partition: int) -> Iterator[pa.RecordBatch]:
    """The decoded rows as record batches of at most :data:`BATCH_ROWS` rows."""
    if not decoded.offsets:
        return
    values, timestamps = (
        pa.concat_arrays(c) if len(c) > 1 else c[0] for c in (decoded.values, decoded.timestamps)
    )
    offsets = np.concatenate(decoded.offsets)
    n = len(offsets)
    whole = pa.RecordBatch.from_arrays(
        [
            values,
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(offsets, pa.int64()),
            timestamps,
        ],
        schema=ARROW,
    )
    for at in range(0, n, BATCH_ROWS):
        yield whole.slice(at, BATCH_ROWS)
