"""The log audit (``--input-format record-batches``): PID sightings from the data topics'
record batches themselves, with no broker change at all.

Every record batch (magic 2) starts with a 61-byte header that carries the
``producerId``, ``producerEpoch`` and the batch's ``maxTimestamp``
(the Kafka transport's ``records.py`` reads them when a format ``reads`` batch headers). The Kafka source reads only those headers: no
record is decoded and nothing is decompressed, so gzip, snappy, lz4 and zstd batches cost
the same. Each batch of an idempotent or transactional producer is one sighting:

* **principal**: the log stores none, so it comes from the topic's owner
  (:class:`Owners`: a topic, or a prefix ``orders-*``, to a principal), and is
  ``Topic:<name>`` for a topic nobody owns;
* **producer_id**, **producer_epoch**: the header's;
* **timestamp**: the header's ``maxTimestamp``, the last record's create time (or the
  broker's append time under ``LogAppendTime``).

Control batches (transaction markers), batches without a producer id (a producer that is
not idempotent) and legacy message sets are counted per kind and dropped.

What it sees is what a partition leader holds in memory: the PIDs writing to each topic.
It cannot see the user who produced (a principal is never stored), nor a PID that was
granted but never wrote.

Worked example: with owners ``{"orders": "User:alice", "pay-*": "User:bob"}``, batches from
PID 7 on ``orders`` and on ``pay-eu``, a PID -1 batch on ``logs`` and a commit marker on
``orders`` give two sightings of PID 7 (one as ``User:alice``, one as ``User:bob``), and
counts ``no producer id`` 1 and ``control batch`` 1.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pidquota.conf.formats import entry
from pidquota.formats.folded import fold, folded_batch, judged_batch, screened_schema, sightings_schema
from pidquota.store.owners import Owners, load_owners

NAME = "record-batches"
# The record batch attribute bit of a control batch (a transaction marker): Kafka's, fixed since
# magic 2. The Kafka transport knows it too, and knows no format; a test keeps the two equal.
CONTROL = 0x20
CONTROL_BATCH, NO_PRODUCER_ID, LEGACY = "control batch", "no producer id", "legacy message set"
NO_TIMESTAMP = "no timestamp"
MAX_TIMESTAMP = 253_402_300_799_999


class AuditScreen:
    """A Kafka source's screen for batch headers (``producer_id``, ``producer_epoch``,
    ``timestamp``, ``attributes``, ``magic``, plus ``kafka_topic``): folded sightings and
    counts out, in the screened schema of the source's ``line_schema`` (``FOLDED`` then the
    line columns, null)."""

    def __init__(self, owners: Owners, line_schema: pa.Schema):
        self.owners = owners
        self.schema = screened_schema(line_schema)

    def screen(self, headers: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        attrs = headers.column("attributes").to_numpy()
        pids = headers.column("producer_id").to_numpy()
        magic = headers.column("magic").to_numpy()
        ts = headers.column("timestamp").to_numpy()
        control = (attrs & CONTROL) != 0
        legacy = magic < 2
        data = ~control & ~legacy
        timed = (ts >= 0) & (ts <= MAX_TIMESTAMP)
        sighted = data & (pids >= 0) & timed
        skipped = Counter(
            {
                CONTROL_BATCH: int(control.sum()),
                LEGACY: int(legacy.sum()),
                NO_PRODUCER_ID: int((data & (pids < 0)).sum()),
                NO_TIMESTAMP: int((data & (pids >= 0) & ~timed).sum()),
            }
        )
        if sighted.any():
            yield folded_batch(fold(self._events(headers.filter(pa.array(sighted)))), self.schema)
        counts = {k: n for k, n in sorted(skipped.items()) if n}
        if counts:
            yield judged_batch([json.dumps({"skipped": counts})], self.schema)

    def _events(self, headers: pa.RecordBatch) -> pa.Table:
        topics = headers.column("kafka_topic")
        names, codes = np.unique(topics.to_numpy(zero_copy_only=False), return_inverse=True)
        principals = pa.array([self.owners.of(t) for t in names], pa.string()).take(pa.array(codes))
        return pa.table(
            {
                "principal": principals,
                "producer_id": headers.column("producer_id"),
                "timestamp": headers.column("timestamp"),
                "producer_epoch": pc.cast(headers.column("producer_epoch"), pa.int32()),
            },
            schema=sightings_schema(),
        )


OPTION = "auditOwners"  # the source option: the owners as JSON


class RecordBatches:
    """The log audit (``pidquota.formats`` protocol): Kafka hands it batch headers, not
    lines; no line is ever its record, so ``recognise`` is False and nothing is sniffed."""

    entry = entry(NAME)
    reads = "batch-headers"
    strict = None
    foreign = None

    def recognise(self, text: str) -> bool:
        return False

    def options(self, config) -> dict[str, str]:
        return {"inputFormat": NAME, OPTION: load_owners(config).to_json()}

    def said(self, config) -> str:
        """The topic owners, for the banner: who each topic's PIDs count for."""
        mapping = load_owners(config).mapping
        shown = ", ".join(f"{t} -> {p}" for t, p in sorted(mapping.items())[:6]) + (
            " ..." if len(mapping) > 6 else ""
        )
        return f" (owners: {shown or 'none'}; a topic nobody owns is Topic:<name>)"

    def screen(self, line_schema: pa.Schema, max_principal: int, options, broker_of=None) -> AuditScreen:
        owners = options.get(OPTION) or options.get(OPTION.lower()) or "{}"
        return AuditScreen(Owners.from_json(owners), line_schema)


FORMAT = RecordBatches()
