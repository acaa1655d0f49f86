"""Decisions, metrics and dead letters to Kafka topics (``pidquota-kafka`` writer).

Each output kind goes to its own topic (options ``decisionsTopic``,
``metricsTopic``, ``deadLettersTopic``, any case; a kind without a topic is not sent),
keyed by principal so one user's decisions stay in order. The producer is
idempotent (no duplicates from its own retries). Delivery is at least once:
a batch that fails part-way is written again in full when Spark retries it.
The stream and batch writers share one ``write``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from pidquota.store.kafka import normalized
from pidquota.store.kafka import producer as kafka_producer
from pidquota.streaming.columns import OUTPUTS

log = logging.getLogger("pidquota.kafka")
# output name -> the writer option naming its topic (lower case, as Spark passes options)
TOPIC_OPTIONS = {"decisions": "decisionstopic", "metrics": "metricstopic", "dead-letters": "deadletterstopic"}


@dataclass
class KafkaCommit(WriterCommitMessage):
    """What one task sent: records per topic."""

    sent: dict[str, int] = field(default_factory=dict)


def produce(options: dict, batches) -> KafkaCommit:
    producer = kafka_producer(options, client_id="pidquota-sink")
    sent: dict[str, int] = {}
    futures = []
    try:
        for batch in batches:
            table = pa.Table.from_batches([batch])
            kinds = table.column("kind").to_pylist()
            for name, (kind, columns) in OUTPUTS.items():
                topic = options.get(TOPIC_OPTIONS.get(name, ""))
                if not topic or kind not in kinds:
                    continue
                rows = table.filter(pc.equal(table["kind"], kind))
                extra = [c for c in ("batch_id",) if c in rows.column_names]
                for row in rows.select([*columns, *extra]).to_pylist():
                    key = row.get("principal")
                    futures.append(
                        producer.send(
                            topic,
                            key=key.encode() if key else None,
                            value=json.dumps(row, separators=(",", ":")).encode(),
                        )
                    )
                    sent[topic] = sent.get(topic, 0) + 1
        producer.flush()
        for f in futures:
            f.get(timeout=60)  # raises if any record was not acknowledged
    finally:
        producer.close()
    return KafkaCommit(sent)


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
