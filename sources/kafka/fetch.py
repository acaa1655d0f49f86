"""The executor side of the Kafka source: Fetch requests decoded straight into Arrow.

:func:`read_range` reads one input partition, the offsets ``start <= offset <
end`` of one topic-partition, and yields Arrow batches in the schema of
``pidquota.sources.kafka.source`` (value, kafka_topic, kafka_partition, kafka_offset,
kafka_timestamp). It sends Kafka Fetch requests itself, on kafka-python's
connection layer (``pidquota.store.kafka.fetch_client``, so the security options apply),
and decodes the raw ``records`` bytes of each response with numpy
(``pidquota.sources.kafka.records``): a Python
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

The Fetch requests are read_uncommitted. For read_committed (the default), the driver plans
no range past a partition's last stable offset and hands each range the aborted
transactions it overlaps, whose batches are dropped here (``transactions.py``). The
transaction markers (control batches) are never rows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from pidquota.sources.kafka.connection import MAX_RESPONSE, Connection, lease
from pidquota.sources.kafka.records import (
    TRANSACTIONAL,
    arrow_batches,
    batch_headers,
    by_producer,
    decode_rows,
    in_aborted,
    walk,
)
from pidquota.sources.kafka.transactions import marks
from pidquota.store.kafka import KafkaError

log = logging.getLogger("pidquota.kafka")
FETCH_BYTES = 8 << 20  # max bytes asked per Fetch (grown when one batch is larger)
RETRY_S = 0.2  # pause after a failed request before the next try
OFFSET_OUT_OF_RANGE = 1


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
    checked: float = 0.0  # when fresh metadata last said the partition is still there
    aborted: dict = field(
        default_factory=dict
    )  # read_committed: the aborted transactions to drop, by producer

    @property
    def name(self) -> str:
        return f"{self.tp.topic}-{self.tp.partition}"


def _rows(batches, at: _Range) -> Iterator[pa.RecordBatch]:
    """The records of a walked response, decoded: the source's line rows."""
    return arrow_batches(decode_rows(batches, at.name), at.tp.topic, at.tp.partition)


def _headers(batches, at: _Range) -> Iterator[pa.RecordBatch]:
    """The batch headers of a walked response alone (the log audit), with the topic-partition;
    not those of aborted transactions."""
    headers = batch_headers(batches)
    if at.aborted and headers.num_rows:
        kept = [
            not (attrs & TRANSACTIONAL and in_aborted(at.aborted, pid, offset))
            for attrs, pid, offset in zip(
                headers.column("attributes").to_pylist(),
                headers.column("producer_id").to_pylist(),
                headers.column("kafka_offset").to_pylist(),
                strict=True,
            )
        ]
        headers = headers.filter(pa.array(kept))
    if headers.num_rows:
        n = headers.num_rows
        topic = pa.repeat(pa.scalar(at.tp.topic, pa.string()), n)
        part = pa.repeat(pa.scalar(at.tp.partition, pa.int32()), n)
        yield headers.append_column("kafka_topic", topic).append_column("kafka_partition", part)


def _marks(batches, at: _Range) -> Iterator[list]:
    """The transactional and control batches of a walked response (the driver's scan)."""
    yield marks(batches)


READS = {"rows": _rows, "headers": _headers, "marks": _marks}


def read_range(part, lost: Callable[[str, dict], None], what: str = "rows") -> Iterator:
    """Read ``part`` (a ``KafkaRange``: topic, partition, start, end, options) as
    Arrow batches, exactly the records with start <= offset < end, in order.

    Offsets deleted before they were read (retention) and a partition that
    disappeared are reported to ``lost(what, options)``, which raises unless
    failOnDataLoss is false; then the gap is skipped. A broker that gives no
    data for ``fetchTimeoutMs`` fails the read. ``what``: ``rows``, the records; ``headers``, one
    row per record batch from its header (``records.HEADERS`` plus the topic-partition), for
    the log audit; ``marks``, lists of ``transactions.Mark`` (the driver's read_committed scan).
    Transactional batches of ``part.aborted`` (read_committed) are left out.
    """
    from kafka import TopicPartition

    opts = part.options
    timeout_s = int(opts.get("fetchtimeoutms", 60_000)) / 1000
    at = _Range(
        TopicPartition(part.topic, part.partition), part.end, opts, lost, part.start, FETCH_BYTES, timeout_s
    )
    at.aborted = by_producer(getattr(part, "aborted", ()))
    with lease(opts) as conn:
        at.deadline = time.monotonic() + at.timeout_s
        while at.pos < at.end:
            records = _fetch(conn, at)
            if records is None:
                return  # the partition is gone, and failOnDataLoss is false
            batches = walk(records, at.pos, at.end, at.aborted, at.name)
            if batches.next_offset > at.pos:
                at.pos, at.deadline = batches.next_offset, time.monotonic() + at.timeout_s
                _send_ahead(conn, at)  # the next Fetch is served while these rows are decoded
                yield from READS[what](batches, at)
            elif records and not batches.complete_batches:
                at.max_bytes = min(2 * at.max_bytes, MAX_RESPONSE)  # one batch larger than the fetch
            elif not _still_there(conn, at) or _gone_at_timeout(conn, at):
                return  # the partition is gone, and failOnDataLoss is false


def _still_there(conn: Connection, at: _Range, every_s: float = 1.0, wait_ms: int = 2000) -> bool:
    """While a planned range gives nothing, fresh metadata (at most every ``every_s``) says
    whether its partition still exists: a topic deleted meanwhile is data lost, named at once,
    not waited for as a broker that is down (its fetches may fail with errors that do not say
    so, or return nothing, while the broker drops the partition)."""
    import kafka.errors as errors

    now = time.monotonic()
    if now - at.checked < every_s:
        return True
    at.checked = now
    try:
        conn.refresh(timeout_ms=wait_ms)  # bounded: a broker that is down is the timeout's to name
    except errors.UnknownTopicOrPartitionError:
        pass  # fresh metadata without the topic: leader() below says so
    except errors.KafkaError:
        return True  # no answer: the timeout decides
    try:
        node = conn.leader(at.tp)
        if node is not None:
            return _log_reaches(conn, node, at)
    except errors.KafkaError:
        return True
    at.lost(f"{at.name} no longer exists (the topic was deleted or recreated?)", at.options)
    return False


def _log_reaches(conn: Connection, node: int, at: _Range) -> bool:
    """Whether the partition's log still reaches past ``at.pos``: a planned range that gives
    nothing while the log now ends at or before where the read stands was lost under it. A
    topic deleted and created again, empty (a client that still tracked it asked the broker
    to create it, or an operator did) fetches nothing, without an error, and was waited for
    as a broker that is down (issue 43 §3, the fourth cause). The high watermark never goes
    back on a leader change (KIP-207: the new leader answers OFFSET_NOT_AVAILABLE, retriable,
    until it has caught up), so only a recreated or truncated log ends below a planned range."""
    last = conn.list_offset(at.tp, node, -1)
    if last > at.pos:
        return True
    at.lost(
        f"{at.name} offsets {at.pos}..{at.end - 1} are past the log end {last} (truncated or recreated)",
        at.options,
    )
    return False


def _gone_at_timeout(conn: Connection, at: _Range) -> bool:
    """At the read's timeout, one last look with a longer wait for metadata before 'is the
    broker up?': under load a metadata answer can take over the 2 s each look allows, and a
    topic deleted meanwhile was then named as a broker that is down (issue 43 §3, the third
    cause: it failed so in a full two-worker suite). True: gone (``lost`` said so)."""
    if time.monotonic() <= at.deadline:
        return False
    at.checked = 0.0
    if not _still_there(conn, at, wait_ms=int(min(at.timeout_s, 10) * 1000)):
        return True
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
        if isinstance(exc, errors.InvalidMetadataError):  # fresh metadata before the next try: a
            try:  # deleted topic is then seen as gone, not waited for as a broker that is down
                conn.refresh()
            except errors.KafkaError:
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
