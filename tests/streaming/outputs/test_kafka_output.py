"""The run's Kafka outputs (streaming/outputs/kafka.py's KafkaOutput), against Apache Kafka, without Spark.

Exactly once: each batch in one transaction, marked sent by a group offset committed in the
same transaction; a replayed batch that was committed is not sent again, one that was not is
sent again; a zombie is fenced. At least once: a replayed batch is sent twice. Topics are
read back read_committed by the Kafka source.
"""

import json

import pyarrow as pa
import pytest
from harness.kafka import create, read_committed

from pidquota.store.kafka import KafkaError
from pidquota.store.kafka import producer as kafka_producer
from pidquota.streaming.columns import DECISION_COLUMNS, KIND_DECISION
from pidquota.streaming.outputs.kafka import KafkaOutput


def batch(batch_id: int, n: int = 3) -> pa.Table:
    rows = [
        {
            "kind": KIND_DECISION,
            **dict.fromkeys(DECISION_COLUMNS),
            "principal": f"User:u{i}",
            "producer_id": batch_id * 100 + i,
            "verdict": "ADMIT",
            "batch_id": batch_id,
        }
        for i in range(n)
    ]
    return pa.Table.from_pylist(rows)


def output(
    kafka, topic: str, mode: str = "exactly-once", factory=kafka_producer, retry_ms: int = 0
) -> KafkaOutput:
    options = {"kafka.bootstrap.servers": kafka.bootstrap, "decisionsTopic": topic, "sinkMode": mode}
    out = KafkaOutput({**options, "sinkRetryMs": str(retry_ms)}, factory)
    out.bind("query-1")
    return out


def sent(kafka, topic: str) -> list[tuple[int, int]]:
    return sorted((r["batch_id"], r["producer_id"]) for r in map(json.loads, read_committed(kafka, topic)))


def test_a_replayed_batch_that_was_committed_is_not_sent_again(kafka):
    create(kafka, "eos-replay")
    first = output(kafka, "eos-replay")
    first.send(batch(0), 0)
    first.send(batch(1), 1)
    first.close()
    again = output(kafka, "eos-replay")  # a restart: Spark replays batch 1, then goes on
    assert again.next_batch == 2
    assert again.send(batch(1), 1) == {}
    again.send(batch(2), 2)
    again.close()
    assert sent(kafka, "eos-replay") == [(b, b * 100 + i) for b in range(3) for i in range(3)]


class DiesAtCommit:
    """A transactional producer whose process dies at the commit: the records are in the log,
    their transaction neither committed nor aborted."""

    def __init__(self, options, **kwargs):
        self.inner = kafka_producer(options, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def commit_transaction(self):
        raise ConnectionError("the driver died here")

    def abort_transaction(self):
        raise ConnectionError("and could not abort")


def test_a_batch_whose_transaction_did_not_commit_is_sent_again_once(kafka):
    create(kafka, "eos-abort")
    first = output(kafka, "eos-abort")
    first.send(batch(0), 0)
    first.close()
    dying = output(kafka, "eos-abort", factory=DiesAtCommit)
    with pytest.raises(ConnectionError):
        dying.send(batch(1), 1)
    assert not dying.bound  # the next batch would bind again
    again = output(kafka, "eos-abort")  # initTransactions aborts the transaction left open
    assert again.next_batch == 1
    assert again.send(batch(1), 1) == {"eos-abort": 3}
    again.close()
    assert sent(kafka, "eos-abort") == [(b, b * 100 + i) for b in range(2) for i in range(3)]


class FailsFirst:
    """Producers of which the first fails at the commit, as one whose broker is lost there:
    ``committed`` says whether that commit reached Kafka before the failure."""

    def __init__(self, committed: bool):
        self.committed, self.made = committed, 0

    def __call__(self, options, **kwargs):
        self.made += 1
        inner = kafka_producer(options, **kwargs)
        if self.made > 1:
            return inner
        lost = self.committed

        class Lost(DiesAtCommit):
            def commit_transaction(self):
                if lost:
                    self.inner.commit_transaction()
                raise ConnectionError("the broker was lost here")

        producer = Lost.__new__(Lost)
        producer.inner = inner
        return producer


@pytest.mark.parametrize("committed", [False, True], ids=["before-the-commit", "after-the-commit"])
def test_a_send_that_fails_is_tried_again_and_the_batch_is_in_kafka_once(kafka, committed):
    topic = f"eos-retry-{int(committed)}"
    create(kafka, topic)
    first = output(kafka, topic)
    first.send(batch(0), 0)
    first.close()
    factory = FailsFirst(committed)
    flaky = output(kafka, topic, factory=factory, retry_ms=30_000)
    assert flaky.send(batch(1), 1) == ({} if committed else {topic: 3})
    assert factory.made == 2 and flaky.next_batch == 2
    flaky.send(batch(2), 2)
    flaky.close()
    assert sent(kafka, topic) == [(b, b * 100 + i) for b in range(3) for i in range(3)]


def test_a_refusal_is_not_tried_again(kafka):
    from kafka.errors import TopicAuthorizationFailedError

    create(kafka, "eos-refused")

    class Refused(DiesAtCommit):
        made = 0

        def __init__(self, options, **kwargs):
            Refused.made += 1
            super().__init__(options, **kwargs)

        def commit_transaction(self):
            raise TopicAuthorizationFailedError("eos-refused")

        def abort_transaction(self):
            self.inner.abort_transaction()

    refused = output(kafka, "eos-refused", factory=Refused, retry_ms=60_000)
    with pytest.raises(TopicAuthorizationFailedError):
        refused.send(batch(0), 0)
    assert Refused.made == 1
    refused.close()


def test_a_send_that_keeps_failing_stops_after_the_retry_time_naming_it(kafka):
    create(kafka, "eos-gone")
    gone = output(kafka, "eos-gone", factory=DiesAtCommit, retry_ms=3_000)
    with pytest.raises(
        KafkaError,
        match=r"batch 0 not sent to Kafka in [2-9] tries, the last 3 s after the first failed .*the driver died",
    ):
        gone.send(batch(0), 0)
    assert sent(kafka, "eos-gone") == []


def test_the_mark_is_on_every_output_topic_so_a_topic_added_later_keeps_it(kafka):
    create(kafka, "eos-dec")
    create(kafka, "eos-met")
    first = output(kafka, "eos-dec")
    first.send(batch(0), 0)
    first.close()
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap,
        "metricsTopic": "eos-met",
        "decisionsTopic": "eos-dec",
    }
    both = KafkaOutput(options)
    both.bind("query-1")
    assert both.next_batch == 1
    both.send(batch(1), 1)
    both.close()
    alone = KafkaOutput({"kafka.bootstrap.servers": kafka.bootstrap, "metricsTopic": "eos-met"})
    alone.bind("query-1")
    assert alone.next_batch == 2
    alone.close()


def test_a_zombie_run_of_the_same_query_is_fenced(kafka):
    create(kafka, "eos-zombie")
    zombie = output(kafka, "eos-zombie")
    zombie.send(batch(0), 0)
    successor = output(kafka, "eos-zombie")  # initTransactions bumps the epoch
    with pytest.raises(KafkaError, match="another run of this query"):
        zombie.send(batch(1), 1)
    successor.send(batch(1), 1)
    successor.close()
    zombie.close()
    assert sent(kafka, "eos-zombie") == [(b, b * 100 + i) for b in range(2) for i in range(3)]


def test_at_least_once_sends_a_replayed_batch_again(kafka):
    create(kafka, "alo-replay")
    first = output(kafka, "alo-replay", "at-least-once")
    first.send(batch(0), 0)
    first.close()
    again = output(kafka, "alo-replay", "at-least-once")
    assert again.send(batch(0), 0) == {"alo-replay": 3}
    again.close()
    assert sent(kafka, "alo-replay") == sorted([(0, i) for i in range(3)] * 2)


def test_an_unknown_mode_is_refused():
    with pytest.raises(KafkaError, match="exactly-once or at-least-once"):
        KafkaOutput({"kafka.bootstrap.servers": "x:1", "decisionsTopic": "t", "sinkMode": "twice"})
