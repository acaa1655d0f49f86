"""read_committed from the log (sources/kafka/transactions.py), without Spark.

The source's Fetch requests are read_uncommitted: Apache Kafka hides nothing from them, so
every test here would see aborted events if the source did not work them out itself. Reads go through ``KafkaStreamReader.latestOffset``, ``partitions`` and ``read``
as Spark calls them.
"""

import json
import logging
import time

import pytest
from harness.kafka import create, read_rows, reader
from kafka import KafkaProducer
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from pidquota.sources.kafka.transactions import (
    ABORT,
    COMMIT,
    Mark,
    PartitionTransactions,
    Transactions,
)
from pidquota.store.kafka import KafkaError


# -- the bookkeeping alone ------------------------------------------------------------------
def T(offset: int, pid: int) -> Mark:
    return Mark(offset, pid, None)


def C(offset: int, pid: int, kind: int = COMMIT) -> Mark:
    return Mark(offset, pid, kind)


def fake_log(marks: list[Mark], scans: list | None = None):
    """A scan over a log holding ``marks``: each call yields those in [start, end)."""

    def scan(topic, p, start, end):
        if scans is not None:
            scans.append((start, end))
        return iter([[m for m in marks if start <= m.base < end]])

    return scan


def test_the_worked_example_of_the_module_docstring():
    part = PartitionTransactions(0, 0)
    part.add([T(0, 7), T(1, 9), T(2, 7)], now=0)
    part.scanned = 3
    assert part.stable == 0
    part.add([C(3, 7, ABORT)], now=0)
    part.scanned = 4
    assert (part.stable, part.aborted) == (1, [(7, 0, 3)])
    part.add([T(4, 9), C(6, 9)], now=0)  # offset 5 is a plain batch: not a mark
    part.scanned = 7
    assert part.stable == 7
    assert part.aborted_in(0, 7) == [(7, 0, 3)]
    assert part.aborted_in(3, 7) == []  # nothing of the aborted one at 3 or later


def test_a_marker_without_an_open_transaction_is_ignored_and_commits_drop_nothing():
    part = PartitionTransactions(10, 10)
    part.add([C(12, 7, ABORT), T(13, 8), C(14, 8)], now=0)  # 7's records came before the scan began
    part.scanned = 15
    assert (part.stable, part.aborted) == (15, [])


def test_an_open_transaction_past_the_timeout_is_aborted_up_to_the_scan_with_a_warning(caplog):
    clock = [0.0]
    txns = Transactions(fake_log([T(0, 5)]), 60_000, lambda: clock[0])
    assert txns.stable_ends({"t": {"0": 0}}, {"t": {"0": 4}}) == {"t": {"0": 0}}  # waits
    clock[0] = 59
    assert txns.stable_ends({"t": {"0": 0}}, {"t": {"0": 4}}) == {"t": {"0": 0}}
    clock[0] = 61
    with caplog.at_level(logging.WARNING, "pidquota.kafka"):
        assert txns.stable_ends({"t": {"0": 0}}, {"t": {"0": 4}}) == {"t": {"0": 4}}
    assert txns.aborted("t", 0, 0, 4) == [(5, 0, 4)]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "producer 5" in warning and "t-0" in warning and "offset 0" in warning
    assert "pidquota.kafka.transaction.timeout.ms" in warning


def test_a_replayed_range_before_the_scan_began_is_scanned_again_from_its_start():
    scans = []
    txns = Transactions(fake_log([T(12, 7), C(20, 7, ABORT)], scans), 60_000, high_watermark=lambda t, p: 25)
    txns.stable_ends({"t": {"0": 15}}, {"t": {"0": 25}})
    assert txns.aborted("t", 0, 10, 15) == [(7, 12, 20)]  # rebuilt from 10, on to the marker at 20
    assert scans == [(15, 25), (10, 15), (15, 25)]
    txns.forget_before({"t": {"0": 20}})
    assert txns.aborted("t", 0, 20, 25) == []


def test_a_replayed_range_whose_marker_lies_past_it_scans_on_to_the_high_watermark():
    """After a restart Spark replays a planned range [10, 15): producer 7's transaction has a
    record at 12 and its ABORT at 20, past the range. The record must still be dropped."""
    log_marks = [T(12, 7), C(20, 7, ABORT)]
    txns = Transactions(fake_log(log_marks), 60_000, high_watermark=lambda topic, p: 25)
    assert txns.aborted("t", 0, 10, 15) == [(7, 12, 20)]
    without = Transactions(fake_log(log_marks), 60_000)  # no way to look further: read, with a warning
    assert without.aborted("t", 0, 10, 15) == []


def test_the_scan_keeps_to_the_read_limit_and_moves_on_past_an_open_transaction():
    """The worked example of Transactions: budget 100, a transaction open at 50, COMMIT at 900."""
    scans = []
    txns = Transactions(fake_log([T(50, 3), C(900, 3)], scans), 60_000)
    start, ends = {"t": {"0": 0}}, {"t": {"0": 10_000}}
    assert txns.stable_ends(start, ends, budget=100) == {"t": {"0": 50}}
    start = {"t": {"0": 50}}
    for _ in range(8):
        assert txns.stable_ends(start, ends, budget=100) == {"t": {"0": 50}}
    # past the COMMIT at 900 all is stable to the scan's end (the read limit then cuts the batch)
    assert txns.stable_ends(start, ends, budget=100) == {"t": {"0": 1000}}
    assert max(end - begin for begin, end in scans) <= 100


def test_a_log_that_went_back_or_a_partition_no_longer_read_is_forgotten():
    txns = Transactions(fake_log([T(5, 1)]), 60_000)
    assert txns.stable_ends({"t": {"0": 0}}, {"t": {"0": 10}}) == {"t": {"0": 5}}
    txns.scan = fake_log([])  # the topic was recreated: a new, shorter log without the transaction
    assert txns.stable_ends({"t": {"0": 0}}, {"t": {"0": 3}}) == {"t": {"0": 3}}
    txns.stable_ends({}, {"u": {"0": 1}})
    assert set(txns.parts) == {("u", 0)}


# -- against a broker -------------------------------------------------------------------------
def transactional(kafka, topic: str, name: str) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id=f"{topic}-{name}")
    producer.init_transactions()
    return producer


def send(producer: KafkaProducer, topic: str, values: list[str]) -> None:
    for v in values:
        producer.send(topic, v.encode())
    producer.flush()  # in the log before the marker (an abort drops what is not sent yet)


def values(rd, topic: str, end: dict) -> list[str]:
    return [r["value"] for r in read_rows(rd, topic, {"0": 0}, end[topic])]


def test_aborted_events_are_never_read_and_committed_ones_are(kafka):
    topic = "rc-aborted"
    create(kafka, topic)
    p = transactional(kafka, topic, "a")
    for prefix, commit in (("c", True), ("a", False), ("d", True)):
        p.begin_transaction()
        send(p, topic, [f"{prefix}{i}" for i in range(3)])
        p.commit_transaction() if commit else p.abort_transaction()
    p.close()
    rd = reader(kafka, topic, fetchTimeoutMs="5000")
    end = rd.latestOffset(rd.initialOffset(), ReadAllAvailable())
    assert end == {topic: {"0": 12}}
    assert values(rd, topic, end) == ["c0", "c1", "c2", "d0", "d1", "d2"]
    uncommitted = reader(kafka, topic, fetchTimeoutMs="5000", **{"kafka.isolation.level": "read_uncommitted"})
    assert len(values(uncommitted, topic, end)) == 9  # the old behaviour, on request


def test_events_of_an_open_transaction_wait_for_its_marker_and_so_does_what_follows(kafka):
    topic = "rc-open"
    create(kafka, topic)
    plain = KafkaProducer(bootstrap_servers=kafka.bootstrap)
    send(plain, topic, ["p0"])
    slow = transactional(kafka, topic, "slow")
    slow.begin_transaction()
    send(slow, topic, ["s0", "s1"])
    send(plain, topic, ["p1"])
    rd = reader(kafka, topic, fetchTimeoutMs="5000")
    start = rd.initialOffset()
    end = rd.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 1}}  # the last stable offset: s0's
    assert values(rd, topic, end) == ["p0"]
    slow.commit_transaction()
    # It returns once the coordinator has the commit; the marker reaches the partition a moment
    # later, and until then the last stable offset stays at s0 (a full run failed on that once).
    deadline = time.monotonic() + 30
    end = rd.latestOffset(end, ReadAllAvailable())
    while end == {topic: {"0": 1}} and time.monotonic() < deadline:
        time.sleep(0.1)
        end = rd.latestOffset(end, ReadAllAvailable())
    assert values(rd, topic, end) == ["p0", "s0", "s1", "p1"]
    slow.close()
    plain.close()


def test_interleaved_transactions_one_aborted_while_the_other_is_open(kafka):
    topic = "rc-interleaved"
    create(kafka, topic)
    a, b = transactional(kafka, topic, "a"), transactional(kafka, topic, "b")
    a.begin_transaction()
    b.begin_transaction()
    send(a, topic, ["a0"])
    send(b, topic, ["b0"])
    send(a, topic, ["a1"])
    a.abort_transaction()
    rd = reader(kafka, topic, fetchTimeoutMs="5000")
    end = rd.latestOffset(rd.initialOffset(), ReadAllAvailable())
    assert end == {topic: {"0": 1}}  # b is open from offset 1
    assert values(rd, topic, end) == []  # a0 is aborted
    send(b, topic, ["b1"])
    b.commit_transaction()
    end = rd.latestOffset(end, ReadAllAvailable())
    assert values(rd, topic, end) == ["b0", "b1"]
    a.close()
    b.close()


def test_a_batch_limit_inside_a_transaction_still_knows_its_fate(kafka):
    """maxOffsetsPerTrigger cuts a range before the marker: the range still drops the aborted."""
    topic = "rc-limited"
    create(kafka, topic)
    p = transactional(kafka, topic, "a")
    p.begin_transaction()
    send(p, topic, [f"a{i}" for i in range(4)])
    p.abort_transaction()
    p.begin_transaction()
    send(p, topic, ["c0"])
    p.commit_transaction()
    rd = reader(kafka, topic, fetchTimeoutMs="5000")
    start, seen = rd.initialOffset(), []
    for _ in range(8):
        end = rd.latestOffset(start, ReadMaxRows(2))
        for part in rd.partitions(start, end):
            seen += [r["value"] for batch in rd.read(part) for r in batch.to_pylist()]
        rd.commit(end)
        start = end
    assert start == {topic: {"0": 7}}
    assert seen == ["c0"]


def test_a_reader_starting_inside_an_aborted_batch_drops_the_rest_of_it(kafka):
    """A start mid-batch (a JSON offset, or a restart after a cut by the read limit): the batch
    began before the start, and its ABORT still drops its records from the start on."""
    topic = "rc-midbatch"
    create(kafka, topic)
    p = KafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id=f"{topic}-a", linger_ms=100)
    p.init_transactions()
    p.begin_transaction()
    send(p, topic, [f"a{i}" for i in range(6)])  # one batch, offsets 0..5
    p.abort_transaction()
    p.begin_transaction()
    send(p, topic, ["c0"])
    p.commit_transaction()
    p.close()
    rd = reader(kafka, topic, fetchTimeoutMs="5000", startingOffsets=json.dumps({topic: {"0": 3}}))
    start = rd.initialOffset()
    end = rd.latestOffset(start, ReadAllAvailable())
    assert [r["value"] for r in read_rows(rd, topic, start[topic], end[topic])] == ["c0"]


def test_the_log_audit_input_leaves_out_aborted_batches(kafka):
    from pidquota.sources.kafka.fetch import read_range
    from pidquota.sources.kafka.source import _lost

    topic = "rc-audit"
    create(kafka, topic)
    p = transactional(kafka, topic, "a")
    for commit in (False, True):
        p.begin_transaction()
        send(p, topic, ["x"])
        p.commit_transaction() if commit else p.abort_transaction()
    p.close()
    rd = reader(kafka, topic, fetchTimeoutMs="5000")
    end = rd.latestOffset(rd.initialOffset(), ReadAllAvailable())
    (part,) = rd.partitions({topic: {"0": 0}}, end)
    offsets = [r["kafka_offset"] for b in read_range(part, _lost, what="headers") for r in b.to_pylist()]
    assert offsets == [1, 2, 3]  # the markers (control batches are rows, as before) and the committed batch


def test_an_unknown_isolation_level_names_the_setting(kafka):
    with pytest.raises(KafkaError, match="pidquota.kafka.isolation.level"):
        reader(kafka, "any", **{"kafka.isolation.level": "committed"})
