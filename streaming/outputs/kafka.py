"""Decisions, metrics and dead letters to Kafka topics.

Each output kind goes to its own topic (options ``decisionsTopic``,
``metricsTopic``, ``deadLettersTopic``, any case; a kind without a topic is not sent),
keyed by principal so one user's decisions stay in order, as one JSON object per record.

The run's sink sends from the driver, where ``foreachBatch`` already holds the batch
(:class:`KafkaOutput`). With ``sinkMode`` ``exactly-once`` (the default) it follows
KIP-447:

- One transactional producer per query. Its transactional id is
  ``pidquota-<query id>``, stable across restarts because Spark keeps the query id in
  the checkpoint. ``initTransactions`` at start-up fences an older run of the same
  query (a zombie) and aborts what it left open.
- Each micro-batch's records go in one transaction. The same transaction commits the
  consumer-group offset ``batch id + 1`` for group ``pidquota-sink-<query id>`` on the
  first output topic's partition 0: that marks the batch as sent, atomically with its
  records.
- A batch that Spark replays after a crash finds that mark. If the batch's transaction
  committed, nothing is sent; if not (it was aborted, or never reached its commit), the
  batch is sent again in a new transaction. A consumer reading ``read_committed`` sees
  each batch's records exactly once.
- A send that fails (a broker lost mid-batch, a coordinator moved) is tried again for up
  to ``sinkRetryMs`` (``pidquota.kafka.sink.retry.ms``), each time with a fresh producer of
  the same transactional id: its ``initTransactions`` aborts the failed transaction, and
  the mark says whether the failed commit reached Kafka after all, so the stream rides
  through a lost broker with each batch sent once.

With ``at-least-once`` the producer is idempotent (no duplicates from its own retries),
without transactions: a batch replayed after a crash is sent again.

The ``pidquota-kafka`` data source writer (``df.write.format("pidquota-kafka")``, batch or
streaming) sends from the executors, at least once. Both paths encode records with
:func:`records`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from pidquota.conf.settings import BY_NAME
from pidquota.sources.kafka.source import KafkaSource
from pidquota.store.kafka import KafkaError, bounded, fenced, normalized
from pidquota.store.kafka import consumer as kafka_consumer
from pidquota.store.kafka import producer as kafka_producer
from pidquota.streaming.columns import OUTPUTS
from pidquota.streaming.outputs.rows import output_rows

log = logging.getLogger("pidquota.kafka")
# output name -> the writer option naming its topic (lower case, as Spark passes options)
TOPIC_OPTIONS = {"decisions": "decisionstopic", "metrics": "metricstopic", "dead-letters": "deadletterstopic"}
EXACTLY_ONCE, AT_LEAST_ONCE = "exactly-once", "at-least-once"
# A whole batch is sent at once: large record batches halve kafka-python's cost per record
# (14k -> 24k records/s against Tansu), under a broker's 1 MiB message.max.bytes default.
PRODUCER = {"client_id": "pidquota-sink", "batch_size": 512 << 10}
# A batch's transaction may stay open as long as a broker allows by default
# (transaction.max.timeout.ms, 15 minutes), not kafka-python's 60 s: a catch-up batch is big.
TRANSACTIONS = {"transaction_timeout_ms": 900_000}


@dataclass
class KafkaCommit(WriterCommitMessage):
    """What one task sent: records per topic."""

    sent: dict[str, int] = field(default_factory=dict)


def records(options: dict, table: pa.Table) -> Iterator[tuple[str, bytes | None, bytes]]:
    """(topic, key, value) for each row of ``table`` whose kind has a topic in ``options``:
    the kind's columns (and ``batch_id`` if present) as one JSON object, keyed by principal."""
    kinds = set(table.column("kind").to_pylist()) if table.num_rows else set()
    for name, (kind, columns) in OUTPUTS.items():
        topic = options.get(TOPIC_OPTIONS.get(name, ""))
        if not topic or kind not in kinds:
            continue
        rows = table.filter(pc.equal(table["kind"], kind))
        extra = [c for c in ("batch_id",) if c in rows.column_names]
        for row in rows.select([*columns, *extra]).to_pylist():
            key = row.get("principal")
            yield topic, key.encode() if key else None, json.dumps(row, separators=(",", ":")).encode()


def produce(options: dict, batches) -> KafkaCommit:
    """The data source writer's task: every row of ``batches``, at least once (the enforcer's
    rows become output rows here, ``streaming/outputs/rows.py``)."""
    producer = kafka_producer(options, client_id="pidquota-sink")
    sent: dict[str, int] = {}
    futures = []
    try:
        for batch in batches:
            for topic, key, value in records(options, output_rows(pa.Table.from_batches([batch]))):
                futures.append(producer.send(topic, key=key, value=value))
                sent[topic] = sent.get(topic, 0) + 1
        producer.flush()
        for f in futures:
            f.get(timeout=60)  # raises if any record was not acknowledged
    finally:
        producer.close()
    return KafkaCommit(sent)


class KafkaOutput:
    """The run's Kafka topics, written from the driver one micro-batch at a time.

    ``bind(query_id)`` once, then ``send(table, batch_id)`` per batch; ``close()`` at the end.
    ``factory`` makes the producer (tests pass one that fails on cue).

    Exactly once, worked example: query ``q1`` with ``decisionsTopic=d`` and
    ``metricsTopic=m``. ``bind("q1")`` opens the transactional producer ``pidquota-q1``
    (fencing any older one) and reads group ``pidquota-sink-q1``'s offsets on ``d-0`` and
    ``m-0``: 8, so batches 0..7 were sent. ``send(rows, 7)`` (a replay) sends nothing.
    ``send(rows, 8)`` sends the rows and commits offset 9 on ``d-0`` and ``m-0`` in the same
    transaction. Every output topic carries the mark, and the largest is read, so adding or
    dropping a topic between runs keeps it. A batch that fails leaves its transaction
    aborted; if even the abort fails, the producer is closed and the next batch binds again.
    """

    def __init__(self, options: dict, factory=kafka_producer):
        self.options = normalized(options)
        self.mode = self.options.get("sinkmode", BY_NAME["pidquota.kafka.sink.mode"].default)
        if self.mode not in (EXACTLY_ONCE, AT_LEAST_ONCE):
            raise KafkaError(f"sinkMode {self.mode!r}: use {EXACTLY_ONCE} or {AT_LEAST_ONCE}")
        self.factory = factory
        self.wait_s = 2 * int(self.options.get("requesttimeoutms", 30_000)) / 1000
        self.retry_s = (
            int(self.options.get("sinkretryms", BY_NAME["pidquota.kafka.sink.retry.ms"].default)) / 1000
        )
        self.clock, self.sleep = time.monotonic, time.sleep
        self.query_id: str | None = None
        self.producer = None
        self.next_batch = 0  # exactly-once: the first batch id not yet committed to Kafka

    @property
    def bound(self) -> bool:
        return self.query_id is not None

    @property
    def markers(self) -> list:
        """The partitions whose group offsets mark the last batch sent: each output topic's 0."""
        from kafka import TopicPartition

        return [TopicPartition(self.options[o], 0) for o in TOPIC_OPTIONS.values() if self.options.get(o)]

    def group(self, query_id: str | None = None) -> str:
        return f"pidquota-sink-{query_id or self.query_id}"

    def bind(self, query_id: str) -> None:
        """Open the producer for this query (Spark's query id, the same across restarts)."""
        if self.mode == AT_LEAST_ONCE:
            self.producer = self.factory(self.options, **PRODUCER)
            self.query_id = query_id
            return
        txn_id = f"pidquota-{query_id}"
        producer = self.factory(self.options, **PRODUCER, **TRANSACTIONS, transactional_id=txn_id)
        try:
            producer.init_transactions()  # fences an older run of this query; aborts what it left open
            self.next_batch = self._committed_mark(query_id)
        except BaseException:
            _close(producer)
            raise
        self.producer, self.query_id = producer, query_id
        log.info(
            "Kafka outputs exactly once: transactional id %s; batches before %d were already sent",
            txn_id,
            self.next_batch,
        )

    def _committed_mark(self, query_id: str) -> int:
        reader = kafka_consumer(self.options, group_id=self.group(query_id), client_id="pidquota-sink")
        try:
            marks = [reader.committed(tp) for tp in self.markers]
        finally:
            reader.close()
        return max((int(getattr(m, "offset", m)) for m in marks if m is not None), default=0)

    def send(self, table: pa.Table, batch_id: int) -> dict[str, int]:
        """The batch's rows to their topics; records sent per topic ({} if already sent)."""
        if self.mode == EXACTLY_ONCE and batch_id < self.next_batch:
            log.info("batch %d is already in Kafka (committed before a restart): not sent again", batch_id)
            return {}
        if self.mode == AT_LEAST_ONCE:
            return self._sent(table)
        return self._retried(table, batch_id)

    def _retried(self, table: pa.Table, batch_id: int) -> dict[str, int]:
        """:meth:`_in_transaction`, tried again with a fresh producer after a failure that a
        lost broker explains, for up to ``retry_s`` after the first failure (a try that hangs on
        the lost broker takes up to ``wait_s`` before it fails); fencing and refused access are
        final."""
        query_id, deadline, tries, pause = self.query_id, None, 0, 0.5
        while True:
            tries += 1
            try:
                if not self.bound:
                    self.bind(query_id)
                    if batch_id < self.next_batch:  # the failed try's commit reached Kafka
                        log.warning(
                            "batch %d: its Kafka transaction did commit; not sent again",
                            batch_id,
                        )
                        return {}
                return self._in_transaction(table, batch_id)
            except Exception as exc:
                deadline = deadline or self.clock() + self.retry_s
                if isinstance(exc, FencedError) or _refused(exc) or self.clock() + pause > deadline:
                    if tries > 1 and not isinstance(exc, FencedError):
                        raise KafkaError(
                            f"batch {batch_id} not sent to Kafka in {tries} tries, the last "
                            f"{self.retry_s:g} s after the first failed (pidquota.kafka.sink.retry.ms): "
                            f"{_said(exc)}"
                        ) from None
                    raise
                log.warning(
                    "batch %d not sent to Kafka (%s); trying again with a new transaction in %g s",
                    batch_id,
                    _said(exc),
                    pause,
                )
                if self.bound:
                    self._unbind()
                self.sleep(pause)
                pause = min(2 * pause, 8.0)

    def _sent(self, table: pa.Table) -> dict[str, int]:
        sent: dict[str, int] = {}
        futures = []
        for topic, key, value in records(self.options, table):
            futures.append(self.producer.send(topic, key=key, value=value))
            sent[topic] = sent.get(topic, 0) + 1
        self.producer.flush(timeout=self.wait_s)
        for f in futures:
            f.get(timeout=self.wait_s)  # raises if any record was not acknowledged
        return sent

    def _in_transaction(self, table: pa.Table, batch_id: int) -> dict[str, int]:
        from kafka.structs import OffsetAndMetadata

        self.producer.begin_transaction()
        try:
            sent = self._sent(table)
            mark = {tp: OffsetAndMetadata(batch_id + 1, "", -1) for tp in self.markers}
            self._bounded(lambda: self.producer.send_offsets_to_transaction(mark, self.group()), batch_id)
            self._bounded(self.producer.commit_transaction, batch_id)
        except Exception as exc:
            if not fenced(exc):
                self._abort(batch_id)
                raise
            self._unbind()
            raise FencedError(
                f"batch {batch_id} not sent: another run of this query (transactional id "
                f"pidquota-{self.query_id}) took over the Kafka outputs, or the batch took longer than "
                "the broker's transaction timeout; this run stops"
            ) from None
        except BaseException:
            self._abort(batch_id)
            raise
        self.next_batch = batch_id + 1
        return sent

    def _bounded(self, step, batch_id: int) -> None:
        """A transaction step for at most ``wait_s`` (kafka-python would wait without end)."""
        bounded(
            step,
            self.wait_s,
            f"batch {batch_id}: the Kafka transaction on {self.options['kafka.bootstrap.servers']}",
        )

    def _abort(self, batch_id: int) -> None:
        try:
            self._bounded(self.producer.abort_transaction, batch_id)
        except Exception as exc:  # the broker is gone: the next bind's initTransactions aborts it
            log.warning("batch %d: its Kafka transaction could not be aborted (%s)", batch_id, exc)
            self._unbind()

    def _unbind(self) -> None:
        """Drop the producer: the next batch binds again (and fences what this one left)."""
        _close(self.producer)
        self.producer, self.query_id = None, None

    def close(self) -> None:
        if self.producer is not None:
            _close(self.producer, timeout_s=self.wait_s)
            self.producer = None


class FencedError(KafkaError):
    """Another run of the same query took over the transactional id: never tried again."""


def _refused(exc: BaseException) -> bool:
    """A refusal that trying again cannot mend: authorization or authentication."""
    name = type(exc).__name__
    return "Authorization" in name or "Authentication" in name


def _said(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _close(producer, timeout_s: float = 0) -> None:
    """Close a producer without hanging or raising (its broker may be gone)."""
    try:
        producer.close(timeout=timeout_s)
    except Exception as exc:
        log.warning("closing the Kafka producer: %s", exc)


def _total(messages) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in messages:
        for topic, n in (m.sent if m else {}).items():
            out[topic] = out.get(topic, 0) + n
    return out


class KafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: dict):
        self.options = normalized(options)
        self.committed: dict[str, int] = {}

    def write(self, iterator) -> KafkaCommit:
        return produce(self.options, iterator)

    def commit(self, messages) -> None:
        self.committed = _total(messages)
        log.info("sent to Kafka: %s", self.committed)

    def abort(self, messages) -> None:
        log.warning(
            "Kafka write aborted after sending %s; delivery is at least once, so a retry may send them again",
            _total(messages),
        )


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict):
        self.options = normalized(options)
        self.committed: dict[int, dict[str, int]] = {}

    def write(self, iterator) -> KafkaCommit:
        return produce(self.options, iterator)

    def commit(self, messages, batchId: int) -> None:
        self.committed[batchId] = _total(messages)
        log.info("batch %d sent to Kafka: %s", batchId, self.committed[batchId])

    def abort(self, messages, batchId: int) -> None:
        log.warning(
            "batch %d aborted after sending %s to Kafka; it is sent again in full when retried (at least once)",
            batchId,
            _total(messages),
        )


class KafkaDataSource(KafkaSource):
    """``pidquota-kafka``, read and written: the Kafka source (``pidquota.sources.kafka``) and
    the writers above under one name, ``spark.readStream.format("pidquota-kafka")`` and
    ``df.write.format("pidquota-kafka")``. Register this one where anything is written."""

    def writer(self, schema, overwrite: bool):
        return KafkaBatchWriter(self.options)

    def streamWriter(self, schema, overwrite: bool):
        return KafkaStreamWriter(self.options)
