"""The executor side of the Kafka source: Fetch requests decoded straight into Arrow.

:func:`read_range` reads one input partition, the offsets ``start <= offset <
end`` of one topic-partition, and yields Arrow batches in the schema of
``streaming.kafka_source`` (value, kafka_topic, kafka_partition, kafka_offset,
kafka_timestamp). It sends Kafka Fetch requests itself, on kafka-python's
connection layer (``store.kafka.fetch_client``, so the security options apply),
and decodes the raw ``records`` bytes of each response with numpy: a Python
loop only hops from record to record by their lengths; the other fields, the
range filter and the gather of the values into one Arrow string column are
vectorised. No Python object is made per record, and no CRC is checked (the
broker checks it when the batch is produced; kafka-python's pure-Python CRC-32C
was most of the old path's time).

Each response is first walked by its batch headers alone (:func:`walk`), which
gives the next offset to fetch; that Fetch is sent at once and the broker
serves it while this response is decoded (:func:`decode_rows`) and handed to
Spark. One connection per Python worker process is kept between reads (and
triggers) for the same connection options; a read with other options closes it.

Isolation is read_uncommitted, like the end offsets the driver plans with (the
high watermark): records of aborted transactions are read too, and the
transaction markers (control batches) are skipped.

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

import atexit
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from store.kafka import KafkaError, client_kwargs, fetch_client
from streaming.kafka_source import _ARROW

log = logging.getLogger("pidquota.kafka")

BATCH_ROWS = 10_000  # rows per Arrow batch handed to Spark
FETCH_BYTES = 8 << 20  # max bytes asked per Fetch (grown when one batch is larger)
MAX_RESPONSE = 128 << 20  # the largest Fetch response accepted (Tansu sends more than asked)
FETCH_WAIT_MS = 100  # how long the broker may hold a Fetch when there is no data yet
RETRY_S = 0.2  # pause after a failed request before the next try

_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte record batch header, as above
_CODECS = {1: ("gzip", None), 2: ("snappy", "python-snappy"), 3: ("lz4", "lz4"), 4: ("zstd", "zstandard")}
OFFSET_OUT_OF_RANGE = 1


# -- decoding ------------------------------------------------------------------------------
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


def walk(records: bytes, start: int, end: int) -> Walk:
    """The batches of ``records`` to decode for [start, end). ``next_offset`` is past every
    complete batch (control batches and compaction gaps included), or ``start``."""
    out, pos, size = Walk(records, start, end, next_offset=start), 0, len(records)
    while pos + 17 <= size:  # offset, length, then the magic byte, in both formats
        base, length, _, magic = struct.unpack_from(">qiib", records, pos)
        stop = pos + 12 + length
        if stop > size or (magic >= 2 and base >= end):
            break  # a batch cut short by the fetch size, or past the range
        out.complete_batches += 1
        last, rows = base, True  # a legacy entry's offset is its last (inner) offset: always decoded
        if magic >= 2:
            attrs, last_delta = struct.unpack_from(">hi", records, pos + 21)
            last = base + last_delta
            count = struct.unpack_from(">i", records, pos + 57)[0]
            rows = not attrs & 0x20 and count > 0 and last >= out.next_offset  # not a marker, nor empty
        if rows:
            out.spans.append((pos, stop, magic))
        out.next_offset = max(out.next_offset, last + 1)
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
            _legacy(view[pos:stop], out, start, end)
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
    if codec == 1:
        return kc.gzip_decode(chunk)
    return getattr(kc, f"{name}_decode")(chunk.tobytes())


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
        bodies = _record_bodies(buf, run)
    except IndexError:
        raise KafkaError(f"a record batch of {where} at offset {run.base_offsets[0]} is corrupt") from None
    arr = np.frombuffer(buf, np.uint8)
    counts = np.asarray(run.counts)
    ts_delta, pos = _varints(arr, bodies + 1)  # after the attributes byte
    off_delta, pos = _varints(arr, pos)
    key_len, pos = _varints(arr, pos)
    val_len, val_start = _varints(arr, pos + np.maximum(key_len, 0))
    offsets = np.repeat(np.asarray(run.base_offsets, np.int64), counts) + off_delta
    ts_delta[np.repeat(np.asarray(run.log_append), counts)] = 0
    timestamps = np.repeat(np.asarray(run.base_timestamps, np.int64), counts) + ts_delta
    keep = np.flatnonzero((offsets >= start) & (offsets < end))
    if len(keep):
        out.offsets.append(offsets[keep])
        out.timestamps.append(pa.array(timestamps[keep], pa.int64()))
        out.values.append(_gather(buf, val_start[keep], val_len[keep]))


def _record_bodies(buf: bytes, run: _Run) -> np.ndarray:
    """Where each record's body starts (after its length varint): the one per-record Python
    loop. A length is never negative, so its zigzag varint is decoded as ``raw >> 1``."""
    starts, pos = [], 0
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
                raw, pos = _varint(buf, pos)
                add(pos)
                pos += raw >> 1
        if pos != stop:
            raise IndexError("records do not fill their batch")
    return np.array(starts, np.int64)


def _varint(buf, pos: int) -> tuple[int, int]:
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
        n, after[i] = _varint(arr.data, int(pos[i]))
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
        schema=_ARROW,
    )
    for at in range(0, n, BATCH_ROWS):
        yield whole.slice(at, BATCH_ROWS)


# -- the connection ------------------------------------------------------------------------
class Connection:
    """kafka-python's connection layer for Fetch and ListOffsets to partition leaders."""

    def __init__(self, options: dict):
        self.options = options
        self.timeout_ms = int(options.get("requesttimeoutms", 30_000))
        self.client = fetch_client(
            options, request_timeout_ms=self.timeout_ms, receive_message_max_bytes=MAX_RESPONSE
        )
        self.client.cluster.config["allow_auto_create_topics"] = False  # a deleted topic stays deleted

    def leader(self, tp) -> int | None:
        """The partition's leader; None once fresh metadata says the partition does not exist."""
        cluster = self.client.cluster
        self._wait(cluster.add_topic(tp.topic))  # done at once when the topic is known
        node = cluster.leader_for_partition(tp)
        if node is None or node < 0:
            self.refresh()
            node = cluster.leader_for_partition(tp)
        if node is None and tp.partition not in (cluster.partitions_for_topic(tp.topic) or ()):
            return None
        if node is None or node < 0:
            from kafka.errors import LeaderNotAvailableError

            raise LeaderNotAvailableError(f"no leader for {tp.topic}-{tp.partition}")
        return node

    def refresh(self) -> None:
        self._wait(self.client.cluster.request_update())

    def _wait(self, future) -> None:
        if not future.is_done:
            self.client.poll(timeout_ms=self.timeout_ms, future=future)
        if not future.is_done:
            from kafka.errors import KafkaTimeoutError

            raise KafkaTimeoutError(f"no metadata from {self.options['kafka.bootstrap.servers']}")
        if future.failed():
            raise future.exception

    def fetch(self, tp, node: int, offset: int, max_bytes: int):
        """One Fetch of one partition: its response's partition data."""
        return self.receive(self.send(tp, node, offset, max_bytes))

    def send(self, tp, node: int, offset: int, max_bytes: int):
        """Send a Fetch (read_uncommitted) of one partition now; :meth:`receive` its answer."""
        from kafka.protocol.consumer import FetchRequest

        part = FetchRequest.FetchTopic.FetchPartition(
            partition=tp.partition,
            current_leader_epoch=-1,
            fetch_offset=offset,
            log_start_offset=-1,
            partition_max_bytes=max_bytes,
        )
        request = FetchRequest(
            max_wait_ms=FETCH_WAIT_MS,
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,  # no fetch session: each request names its partition
            topics=[FetchRequest.FetchTopic(topic=tp.topic, partitions=[part])],
            forgotten_topics_data=[],
            rack_id="",
            max_version=12,  # v13+ names topics by id
        )
        self.client.await_ready(node, timeout_ms=self.timeout_ms)
        future = self.client.send(node, request)
        for _ in range(3):  # the write waits one selector round for the socket to be writable
            self.client.poll(timeout_ms=0)  # then the broker works on it while the caller decodes
        return future

    def receive(self, future):
        """The partition data of a Fetch that :meth:`send` sent."""
        if not future.is_done:
            self.client.poll(timeout_ms=self.timeout_ms + FETCH_WAIT_MS, future=future)
        if not future.is_done:
            from kafka.errors import KafkaTimeoutError

            raise KafkaTimeoutError(f"no Fetch response in {self.timeout_ms + FETCH_WAIT_MS} ms")
        if future.failed():
            raise future.exception
        return future.value.responses[0].partitions[0]

    def list_offset(self, tp, node: int, spec: int) -> int:
        """ListOffsets: -2 the log start, -1 the log end."""
        import kafka.errors as errors
        from kafka.protocol.consumer import ListOffsetsRequest

        topic = ListOffsetsRequest.ListOffsetsTopic
        part = topic.ListOffsetsPartition(
            partition_index=tp.partition, current_leader_epoch=-1, timestamp=spec
        )
        request = ListOffsetsRequest(
            replica_id=-1, isolation_level=0, topics=[topic(name=tp.topic, partitions=[part])], min_version=1
        )
        answer = (
            self.client.send_and_receive(node, request, timeout_ms=self.timeout_ms).topics[0].partitions[0]
        )
        if answer.error_code:
            raise errors.for_code(answer.error_code)(f"ListOffsets of {tp.topic}-{tp.partition}")
        return answer.offset

    def close(self) -> None:
        self.client.close()


_idle: dict[tuple, tuple[int, Connection]] = {}  # at most one: connection key -> (pid, connection)
_idle_lock = threading.Lock()


def _key(options: dict) -> tuple:
    kwargs = client_kwargs(options)
    return (*sorted((k, str(v)) for k, v in kwargs.items()), options.get("requesttimeoutms", ""))


@contextmanager
def lease(options: dict) -> Iterator[Connection]:
    """A connection for these options: the idle one of this process if it has the same
    options, else a new one (the idle one, for other options, is closed). Handed back
    idle after a clean read; closed after an error."""
    key = _key(options)
    with _idle_lock:
        pid, conn = _idle.pop(key, (None, None))
        stale = list(_idle.values())
        _idle.clear()
    for owner, other in stale:
        if owner == os.getpid():  # a forked child must not close its parent's sockets
            other.close()
    if conn is None or pid != os.getpid():
        conn = Connection(options)
    try:
        yield conn
    except BaseException:
        conn.close()
        raise
    with _idle_lock:
        extra = _idle.get(key)  # a concurrent read handed one back first
        if extra is None:
            _idle[key] = (os.getpid(), conn)
    if extra is not None:
        conn.close()


@atexit.register
def close_idle() -> None:
    """Close the idle connection (at exit, and in tests)."""
    with _idle_lock:
        idle = list(_idle.values())
        _idle.clear()
    for owner, conn in idle:
        if owner == os.getpid():
            conn.close()


# -- reading a range -----------------------------------------------------------------------
@dataclass
class _Range:
    """Where a read stands: the next offset to fetch, the fetch size, and the deadline."""

    tp: object
    end: int
    options: dict
    lost: Callable[[str, dict], None]
    pos: int
    max_bytes: int
    timeout_s: float
    deadline: float = 0.0
    ahead: tuple | None = None  # (leader, the Fetch in flight for ``pos``)

    @property
    def name(self) -> str:
        return f"{self.tp.topic}-{self.tp.partition}"


def read_range(part, lost: Callable[[str, dict], None]) -> Iterator[pa.RecordBatch]:
    """Read ``part`` (a ``KafkaRange``: topic, partition, start, end, options) as
    Arrow batches, exactly the records with start <= offset < end, in order.

    Offsets deleted before they were read (retention) and a partition that
    disappeared are reported to ``lost(what, options)``, which raises unless
    failOnDataLoss is false; then the gap is skipped. A broker that gives no
    data for ``fetchTimeoutMs`` fails the read.
    """
    from kafka import TopicPartition

    opts = part.options
    timeout_s = int(opts.get("fetchtimeoutms", 60_000)) / 1000
    at = _Range(
        TopicPartition(part.topic, part.partition), part.end, opts, lost, part.start, FETCH_BYTES, timeout_s
    )
    with lease(opts) as conn:
        at.deadline = time.monotonic() + at.timeout_s
        while at.pos < at.end:
            records = _fetch(conn, at)
            if records is None:
                return  # the partition is gone, and failOnDataLoss is false
            batches = walk(records, at.pos, at.end)
            if batches.next_offset > at.pos:
                at.pos, at.deadline = batches.next_offset, time.monotonic() + at.timeout_s
                _send_ahead(conn, at)  # the next Fetch is served while these rows are decoded
                yield from arrow_batches(decode_rows(batches, at.name), at.tp.topic, at.tp.partition)
            elif records and not batches.complete_batches:
                at.max_bytes = min(2 * at.max_bytes, MAX_RESPONSE)  # one batch larger than the fetch
            else:
                _give_up_after_timeout(at)


def _give_up_after_timeout(at: _Range) -> None:
    if time.monotonic() > at.deadline:
        raise KafkaError(
            f"no data from {at.name} for {at.timeout_s:g} s while reading offsets {at.pos}..{at.end - 1} "
            f"from {at.options['kafka.bootstrap.servers']}: is the broker up? "
            "(pidquota.kafka.fetch.timeout.ms sets how long to wait)"
        )


def _fetch(conn: Connection, at: _Range) -> bytes | None:
    """The records bytes at ``at.pos``: b"" when there is nothing yet (or a
    retriable error), None when the partition no longer exists."""
    import kafka.errors as errors

    try:
        if at.ahead is None:
            node = conn.leader(at.tp)
            if node is None:
                at.lost(f"{at.name} no longer exists (the topic was deleted or recreated?)", at.options)
                return None
            at.ahead = (node, conn.send(at.tp, node, at.pos, at.max_bytes))
        (node, pending), at.ahead = at.ahead, None
        data = conn.receive(pending)
        if data.error_code == OFFSET_OUT_OF_RANGE:
            return _out_of_range(conn, node, at)
        if data.error_code:
            error = errors.for_code(data.error_code)
            if not issubclass(error, errors.RetriableError):
                raise KafkaError(
                    f"fetching {at.name} at offset {at.pos} from {at.options['kafka.bootstrap.servers']} "
                    f"failed: {error.__name__}: {error.description}"
                )
            raise error()
        return data.records or b""
    except errors.KafkaError as exc:  # retriable: no connection, a timeout, a leader moving
        log.debug("fetching %s at %d: %s; retrying", at.name, at.pos, exc)
        if isinstance(exc, errors.InvalidMetadataError):
            conn.client.cluster.request_update()
        time.sleep(RETRY_S)
        return b""


def _send_ahead(conn: Connection, at: _Range) -> None:
    """Send the Fetch for ``at.pos`` now, if the range goes on (else nothing is left in
    flight on a connection handed back idle). A failure here is retried by :func:`_fetch`."""
    import kafka.errors as errors

    if at.pos >= at.end:
        return
    try:
        node = conn.leader(at.tp)
        if node is not None:
            at.ahead = (node, conn.send(at.tp, node, at.pos, at.max_bytes))
    except errors.KafkaError as exc:
        log.debug("sending the next Fetch of %s at %d: %s", at.name, at.pos, exc)


def _out_of_range(conn: Connection, node: int, at: _Range) -> bytes | None:
    """The offset to read is gone: deleted by retention, or past a truncated log end."""
    first = conn.list_offset(at.tp, node, -2)
    if first > at.pos:
        at.lost(f"{at.name} offsets {at.pos}..{first - 1} were deleted before they were read", at.options)
        at.pos = first
        return b""
    last = conn.list_offset(at.tp, node, -1)
    at.lost(
        f"{at.name} offsets {at.pos}..{at.end - 1} are past the log end {last} (truncated or recreated)",
        at.options,
    )
    return None
