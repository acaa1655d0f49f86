"""A Kafka streaming source on kafka-python (``pidquota-kafka``).

Spark's own Kafka connector is a JVM jar; this one is a Python data source.
Offsets are ``{topic: {partition: offset}}`` (JSON keys are strings).

End offsets are the larger of ListOffsets "latest" and the high watermark
that a Fetch reports. On Apache Kafka the two agree. Some Kafka-protocol brokers
(Tansu, which the tests ran on before Apache Kafka) under-report ListOffsets at the end of a
multi-record batch while their high watermark is right, so this source reads exactly to the
true end on both.
The driver asks both on one consumer that lives as long as the reader.

Isolation (option ``kafka.isolation.level``) is read_committed by default, done from the
log's control batches (``transactions.py``): the driver plans no batch past a partition's
last stable offset, and each range drops the batches of the aborted transactions it
overlaps. read_uncommitted reads every record, as before.
"""

from __future__ import annotations

import fnmatch
import logging
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

import pidquota.formats as formats
from pidquota.conf.settings import BY_NAME
from pidquota.formats.folded import screen_limit, screened_schema
from pidquota.sources import stopping
from pidquota.sources.kafka.records import ARROW, SCHEMA
from pidquota.sources.kafka.transactions import READ_COMMITTED, READ_UNCOMMITTED, Transactions
from pidquota.store.kafka import KafkaError, consumer, normalized, parse_starting_offsets, safe_options

log = logging.getLogger("pidquota.kafka")


class KafkaRange(InputPartition):
    """One partition's offsets start <= offset < end; ``aborted``: the aborted transactions whose
    batches the read drops (read_committed), each (producer id, first offset, marker offset)."""

    def __init__(self, topic: str, partition: int, start: int, end: int, options: dict, aborted=()):
        self.topic, self.partition, self.start, self.end, self.options = topic, partition, start, end, options
        self.aborted = list(aborted)


def _consumer(options: dict, **extra):
    return consumer(options, request_timeout_ms=int(options.get("requesttimeoutms", 30_000)), **extra)


def _driver_client(options: dict):
    """The driver's consumer: metadata, ListOffsets, and a Fetch at the end for the high
    watermark. Such a Fetch is answered within 10 ms (a short long-poll; some Kafka-protocol
    brokers never answer one of 0 ms) with one small batch at most. Incremental fetch sessions are off, so that every
    Fetch names every partition and every answer carries its high watermark (in a session, a
    partition with nothing new may be left out of the answer)."""
    from kafka import KafkaConsumer

    extra = {"fetch_max_wait_ms": 10, "max_partition_fetch_bytes": 1024}
    if "enable_incremental_fetch_sessions" in KafkaConsumer.DEFAULT_CONFIG:
        extra["enable_incremental_fetch_sessions"] = False
    return _consumer(options, **extra)


def _lost(what: str, options: dict) -> None:
    """Data the query needs is gone: fail (the default), or with failOnDataLoss=false log a
    warning naming what is skipped and carry on."""
    if options.get("failondataloss", "true").lower() == "true":
        raise KafkaError(
            f"data loss: {what}. The query cannot resume where it stopped; set "
            "pidquota.kafka.fail.on.data.loss=false to skip what is gone and carry on"
        )
    log.warning("data loss skipped (pidquota.kafka.fail.on.data.loss=false): %s", what)


def share(available: dict, budget: int) -> dict:
    """Split ``budget`` records over partitions in proportion to what each has ``available``,
    never more in total: each gets its share rounded down, then the records left over go one
    each to the largest remainders (then the longest backlogs). ``budget >= 1`` always moves."""
    total = sum(available.values())
    if total <= budget:
        return dict(available)
    take = {k: budget * n // total for k, n in available.items()}
    left = budget - sum(take.values())
    ranked = sorted(available, key=lambda k: (-(budget * available[k] % total), -available[k], k))
    for k in ranked[:left]:  # a remainder > 0 means its share is below what it has
        take[k] += 1
    return take


def _copy(offsets: dict) -> dict:
    return {topic: dict(parts) for topic, parts in offsets.items()}


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict):
        options = normalized(options)
        if not options.get("kafka.bootstrap.servers") or not options.get("subscribe"):
            raise KafkaError("the Kafka source needs options 'kafka.bootstrap.servers' and 'subscribe'")
        self.options = options
        self.topics = [t.strip() for t in options["subscribe"].split(",") if t.strip()]
        self.max_per_trigger = int(options.get("maxoffsetspertrigger", 0))
        self._client = None
        self._target: dict | None = None  # availableNow: the end offsets when the query started
        self._txns = self._transactions(options)
        self._warned: dict = {}  # (topic, partition) -> the offset an open transaction held it at
        log.info("Kafka source options: %s", safe_options(options))  # the SASL password redacted

    # -- driver side -------------------------------------------------------------------
    def _transactions(self, options: dict) -> Transactions | None:
        """read_committed (the default): the transactions followed from the log; else None."""
        level = options.get("kafka.isolation.level", BY_NAME["pidquota.kafka.isolation.level"].default)
        if level not in (READ_COMMITTED, READ_UNCOMMITTED):
            raise KafkaError(
                f"kafka.isolation.level {level!r}: use {READ_COMMITTED} or {READ_UNCOMMITTED} "
                "(pidquota.kafka.isolation.level)"
            )
        if level == READ_UNCOMMITTED:
            return None
        timeout_ms = int(
            options.get("transactiontimeoutms", BY_NAME["pidquota.kafka.transaction.timeout.ms"].default)
        )
        return Transactions(self._scan, timeout_ms, high_watermark=self._high_watermark)

    def _high_watermark(self, topic: str, partition: int) -> int:
        from kafka import TopicPartition

        tp = TopicPartition(topic, partition)
        return self._end_offsets([tp])[tp]

    def _scan(self, topic: str, partition: int, start: int, end: int):
        """The transaction marks of a partition's offsets [start, end), read on the driver."""
        from pidquota.sources.kafka.fetch import read_range

        return read_range(KafkaRange(topic, partition, start, end, self.options), _lost, what="marks")

    @property
    def client(self):
        if self._client is None:
            self._client = _driver_client(self.options)
        return self._client

    def _topic_names(self) -> list[str]:
        """The topics read: those named, and those matching a pattern (``orders-*``), listed
        again at every trigger so that a new matching topic is read from its beginning."""
        names = [t for t in self.topics if "*" not in t]
        patterns = [t for t in self.topics if "*" in t]
        if patterns:  # never pidquota's own outputs: a run would audit its own writes
            mine = set(filter(None, self.options.get("excludetopics", "").split(",")))
            existing = sorted(t for t in self.client.topics() if not t.startswith("__") and t not in mine)
            names += [
                t for t in existing if t not in names and any(fnmatch.fnmatchcase(t, p) for p in patterns)
            ]
        return names

    def _partitions(self):
        from kafka import TopicPartition

        tps = []
        for topic in self._topic_names():
            parts = self.client.partitions_for_topic(topic)
            if not parts:
                raise KafkaError(
                    f"topic {topic!r} does not exist on {self.options['kafka.bootstrap.servers']}"
                )
            tps += [TopicPartition(topic, p) for p in sorted(parts)]
        return tps

    def _end_offsets(self, tps) -> dict:
        """max(ListOffsets latest, Fetch high watermark) per partition, on the driver's one client.

        A consumer keeps the last high watermark it saw: ``unsubscribe`` drops that state, so each
        call waits for a Fetch answered after its own ListOffsets. (kafka-python takes a late
        answer to an earlier call's Fetch only if that Fetch was for the offset just sought, i.e.
        ListOffsets has not moved since, so nothing was appended meanwhile.) The wait is bounded
        by the request timeout; a partition without an answer by then keeps ListOffsets' end, a
        lower bound: the next trigger reads the rest.
        """
        from kafka.errors import UnsupportedCodecError

        c = self.client
        listed = c.end_offsets(tps)
        c.unsubscribe()
        c.assign(tps)
        for tp in tps:
            c.seek(tp, listed[tp])
        timeout_ms = int(self.options.get("requesttimeoutms", 30_000))
        deadline = time.monotonic() + timeout_ms / 1000
        own: dict = {}
        while (silent := [tp for tp in tps if c.highwater(tp) is None]) and time.monotonic() < deadline:
            try:
                c.poll(timeout_ms=5, max_records=1, update_offsets=False)
            except UnsupportedCodecError:  # a batch kafka-python cannot decompress: ask without decoding
                own = self._high_watermarks(silent, listed)
                silent = [tp for tp in silent if tp not in own]
                break
        if silent:
            log.warning(
                "no high watermark from %s within %g s (pidquota.kafka.request.timeout.ms); "
                "reading to ListOffsets' end there this trigger",
                ", ".join(f"{tp.topic}-{tp.partition}" for tp in silent),
                timeout_ms / 1000,
            )
        return {tp: max(listed[tp], own.get(tp) or c.highwater(tp) or 0) for tp in tps}

    def _high_watermarks(self, tps, listed: dict) -> dict:
        """High watermarks from the source's own Fetch at each partition's listed end, whose
        records are never decoded (a log audit of batches compressed with a codec that
        kafka-python lacks). A partition that does not answer is left out."""
        from kafka.errors import KafkaError as ClientError

        from pidquota.sources.kafka.connection import Connection

        conn, out = Connection(self.options), {}
        try:
            for tp in tps:
                try:
                    node = conn.leader(tp)
                    if node is not None:
                        out[tp] = conn.fetch(tp, node, listed[tp], 1024).high_watermark
                except ClientError as exc:
                    log.debug("high watermark of %s: %s", tp, exc)
        finally:
            conn.close()
        return out

    def _map(self, offsets: dict) -> dict:
        out: dict[str, dict[str, int]] = {}
        for tp, off in offsets.items():
            out.setdefault(tp.topic, {})[str(tp.partition)] = int(off)
        return out

    def _starts(self, start: dict, ends: dict) -> dict:
        """A copy of ``start`` (Spark's, not changed) plus the partitions of ``ends`` it lacks,
        which are new: they start at their beginning offset, as in Spark's Kafka connector."""
        from kafka import TopicPartition

        out = _copy(start)
        new = [
            TopicPartition(t, int(p)) for t, parts in ends.items() for p in parts if p not in out.get(t, {})
        ]
        if new:
            for topic, parts in self._map(self.client.beginning_offsets(new)).items():
                out.setdefault(topic, {}).update(parts)
        return out

    def initialOffset(self) -> dict:
        tps = self._partitions()
        how = parse_starting_offsets(self.options.get("startingoffsets", "earliest"))
        if how == "earliest":
            return self._map(self.client.beginning_offsets(tps))
        if how == "latest":
            return self._map(self._end_offsets(tps))
        if isinstance(how, int):  # a timestamp in ms: ListOffsets by time
            found = self.client.offsets_for_times({tp: how for tp in tps})
            ends = self._end_offsets(tps)
            return self._map({tp: (found[tp].offset if found[tp] else ends[tp]) for tp in tps})
        return self._given(tps, how)

    def _given(self, tps, given: dict) -> dict:
        """A JSON offset map: -1 is the partition's end and -2 its beginning (Spark's convention);
        a partition it leaves out starts at its beginning."""
        out = self._map(self.client.beginning_offsets(tps))
        latest = any(-1 in parts.values() for parts in given.values())
        ends = self._map(self._end_offsets(tps)) if latest else {}
        for topic, parts in given.items():
            for p, off in parts.items():
                if p not in out.get(topic, {}):
                    raise KafkaError(f"startingOffsets names {topic}-{p}, which does not exist")
                if off != -2:
                    out[topic][p] = ends[topic][p] if off == -1 else off
        return out

    def prepareForTriggerAvailableNow(self) -> None:
        """availableNow: read what is there now, in batches within the engine's read limit."""
        self._target = self._map(self._end_offsets(self._partitions()))

    def latestOffset(self, start: dict, limit) -> dict:
        """The end of the next batch: the topics' ends (availableNow: the target fixed at the
        start, never beyond), within the engine's ``limit``. ``start`` is Spark's: not changed."""
        if stopping.requested(self.options):
            return start
        tps = self._partitions()
        ends = _copy(self._target) if self._target is not None else self._map(self._end_offsets(tps))
        named = {t for t in self.topics if "*" not in t}
        for topic, parts in start.items():  # partitions that disappeared
            if topic not in ends and topic not in named:  # a topic a pattern matched was deleted
                log.warning(
                    "pidquota: topic %s, matched by %s, is gone; it is no longer read", topic, self.topics
                )
                continue
            for p, off in parts.items():
                if p not in ends.get(topic, {}):
                    _lost(
                        f"{topic}-{p} no longer exists (the topic was recreated with fewer partitions?); "
                        f"what it held from offset {off} on is not read",
                        self.options,
                    )
        starts = self._starts(start, ends)
        if self._txns is not None:  # records of an open transaction wait for its marker
            budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            stable = self._txns.stable_ends(starts, ends, budget)
            if self._target is not None:
                self._held_back(starts, stable)
            ends = stable
        return self._limited(start, starts, ends, limit)

    def _held_back(self, starts: dict, stable: dict) -> None:
        """availableNow (``--once``) ends where nothing more is stable: say which open
        transaction stops a partition short of the target, once per partition and offset."""
        for topic, parts in stable.items():
            for p, end in parts.items():
                held = self._txns.open_at(topic, int(p))
                short = end < self._target.get(topic, {}).get(p, end) and end == starts[topic][p]
                if held and short and self._warned.get((topic, p)) != end:
                    self._warned[(topic, p)] = end
                    log.warning(
                        "pidquota: %s-%d is read up to offset %d only: producer %d's transaction there "
                        "has no COMMIT or ABORT yet. A later run reads on once it has one (or after "
                        "pidquota.kafka.transaction.timeout.ms)",
                        topic,
                        int(p),
                        end,
                        held[0],
                    )

    def _limited(self, start: dict, starts: dict, ends: dict, limit) -> dict:
        """``ends`` within ``limit``, the ReadLimit Spark passes (pyspark 4.3 may pass any of
        ReadAllAvailable, ReadMaxRows, ReadMinRows, ReadMaxFiles, ReadMaxBytes)."""
        available = {(t, p): max(0, ends[t][p] - starts[t][p]) for t in ends for p in ends[t]}
        if isinstance(limit, ReadAllAvailable):
            return ends
        if isinstance(limit, ReadMinRows):  # availableNow must finish: the rest of its target is enough
            enough = sum(available.values()) >= limit.min_rows or self._target is not None
            return ends if enough else start
        if not isinstance(limit, ReadMaxRows) or limit.max_rows < 1:
            raise KafkaError(
                f"Spark asked the Kafka source for a batch within {limit!r}, which it cannot honour: "
                "it counts records, and needs a limit of at least 1 (maxOffsetsPerTrigger, "
                "pidquota.max.events.per.trigger)"
            )
        out = _copy(ends)
        for (t, p), n in share(available, limit.max_rows).items():
            if available[(t, p)]:
                out[t][p] = starts[t][p] + n
        return out

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def partitions(self, start: dict, end: dict):
        """One range per partition with records from ``start`` to ``end``. A partition missing
        from ``start`` is new: it starts at its beginning offset, as ``latestOffset`` counted it,
        and records already deleted from it are data loss (as in Spark's Kafka connector)."""
        starts = self._starts(start, end)
        ranges = []
        for topic, parts in end.items():
            for p, until in parts.items():
                since, new = starts[topic][p], p not in start.get(topic, {})
                if new and since > 0:
                    _lost(
                        f"{topic}-{p} is a new partition, but its offsets 0..{since - 1} were deleted "
                        "before they were read",
                        self.options,
                    )
                if until > since:
                    aborted = self._txns.aborted(topic, int(p), since, until) if self._txns else ()
                    ranges.append(KafkaRange(topic, int(p), int(since), int(until), self.options, aborted))
                elif until < since and not new:
                    _lost(
                        f"{topic}-{p} went back from offset {since} to {until} (truncated or recreated); "
                        f"reading goes on from offset {until}",
                        self.options,
                    )
        return ranges

    def commit(self, end: dict) -> None:
        """Nothing is committed to Kafka (Spark's checkpoint is the source of truth); aborted
        transactions that no later read can need are forgotten."""
        if self._txns is not None:
            self._txns.forget_before(end)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()

    # -- executor side -------------------------------------------------------------------
    def read(self, partition: KafkaRange) -> Iterator[pa.RecordBatch]:
        from pidquota.sources.kafka.fetch import (
            read_range,  # Fetch requests decoded straight into Arrow
        )

        if formats.of_options(partition.options).reads == "batch-headers":  # not records
            return formats.screened(read_range(partition, _lost, what="headers"), ARROW, partition.options)
        return formats.screened(read_range(partition, _lost), ARROW, partition.options)


class KafkaSource(DataSource):
    """``spark.readStream.format("pidquota-kafka").option("kafka.bootstrap.servers", ...)
    .option("subscribe", "events").load()``; see the module docstring. Its writers are
    ``pidquota.streaming.outputs.kafka.KafkaDataSource``'s, the same data source with both."""

    @classmethod
    def name(cls) -> str:
        return "pidquota-kafka"

    def schema(self):
        return from_arrow_schema(screened_schema(ARROW)) if screen_limit(self.options) else SCHEMA

    def streamReader(self, schema) -> KafkaStreamReader:
        return KafkaStreamReader(self.options)
