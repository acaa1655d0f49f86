"""The Kafka source's executor side (sources/kafka/fetch.py), without Spark.

Reads go through ``KafkaStreamReader.partitions`` and ``read`` as Spark would
call them, against Apache Kafka; the decoder is also fed hand-built record batches.
The source's Fetch requests are read_uncommitted (it works read_committed out itself); the
test of a range ending on a marker reads read_uncommitted, so aborted records are expected there
(read_committed is tested in test_kafka_transactions.py).
"""

import time

import pytest
from harness.kafka import create, read_rows, reader
from kafka import KafkaProducer
from pyspark.sql.streaming.datasource import ReadAllAvailable

from pidquota.store.kafka import KafkaError


def produce_transactions(kafka, topic: str) -> None:
    """Committed, aborted, committed: the log ends on a commit marker."""
    create(kafka, topic)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id=f"{topic}-txn")
    producer.init_transactions()
    for prefix, commit in (("c", True), ("a", False), ("d", True)):
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, f"{prefix}{i}".encode())
        producer.flush()  # an abort drops what is not sent yet; these reach the log
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()


def test_a_range_ending_on_a_transaction_marker_is_read_to_its_end_at_once(kafka):
    produce_transactions(kafka, "txn")
    rd = reader(kafka, "txn", fetchTimeoutMs="5000", **{"kafka.isolation.level": "read_uncommitted"})
    end = rd.latestOffset(rd.initialOffset(), ReadAllAvailable())
    assert end == {"txn": {"0": 12}}  # 9 records and 3 markers: 3, 7 and 11
    t0 = time.monotonic()
    rows = read_rows(rd, "txn", {"0": 0}, end["txn"])
    assert time.monotonic() - t0 < 3  # not the fetch timeout
    assert [r["value"] for r in rows] == ["c0", "c1", "c2", "a0", "a1", "a2", "d0", "d1", "d2"]
    assert [r["kafka_offset"] for r in rows] == [0, 1, 2, 4, 5, 6, 8, 9, 10]


# -- the new path yields what kafka-python's consumer yields --------------------------------
VALUES = [
    b'{"principal":"User:a","producer_id":1}',
    None,
    b"",
    "żółć 日本語 😀".encode(),
    b"\xff\xfe invalid",
    b"a\xed\xa0\x80b",  # a UTF-8-encoded surrogate: invalid
    b"cut \xe2\x82",  # a truncated multi-byte sequence
    b"x" * 70_000,  # a value longer than 64 KiB (a 3-byte length varint)
    "é".encode() * 40_000,
]


def codecs() -> list:
    from kafka import codec

    return [None, "gzip"] + [
        c
        for c, has in (("snappy", codec.has_snappy), ("lz4", codec.has_lz4), ("zstd", codec.has_zstd))
        if has()
    ]


def produce_varied(kafka, topic: str, partitions: int = 3) -> None:
    """Each codec's producer sends every kind of value, with and without keys and headers."""
    create(kafka, topic, partitions)
    for codec in codecs():
        producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, compression_type=codec, linger_ms=5)
        for i in range(60):
            value = VALUES[i % len(VALUES)]
            key = None if i % 3 == 0 and value is not None else f"k{i}".encode()
            headers = [("h", b"v"), ("empty", b"")] if i % 4 == 0 else []
            producer.send(topic, value=value, key=key, headers=headers, partition=i % partitions)
            if i % 17 == 0:
                producer.flush()  # several batches per codec
        producer.flush()
        producer.close()


def consumer_rows(kafka, topic: str, partition: int, start: int, end: int) -> list[dict]:
    """What the old path yielded: kafka-python's consumer, each value decoded with replacement."""
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, partition)
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False)
    consumer.assign([tp])
    consumer.seek(tp, start)
    rows, deadline = [], time.monotonic() + 30
    while consumer.position(tp) < end and time.monotonic() < deadline:
        for rec in consumer.poll(timeout_ms=200).get(tp, []):
            if start <= rec.offset < end:
                value = None if rec.value is None else rec.value.decode("utf-8", "replace")
                rows.append(
                    {
                        "value": value,
                        "kafka_topic": topic,
                        "kafka_partition": partition,
                        "kafka_offset": rec.offset,
                        "kafka_timestamp": rec.timestamp,
                    }
                )
    consumer.close()
    return rows


def test_rows_equal_kafka_pythons_consumer_on_every_range(kafka):
    produce_varied(kafka, "varied")
    rd = reader(kafka, "varied")
    ends = rd.latestOffset(rd.initialOffset(), ReadAllAvailable())["varied"]
    assert sum(ends.values()) == 60 * len(codecs())
    seen = set()
    for p, end in ends.items():
        for start, stop in ((0, end), (1, end - 1), (7, 8), (end // 2, end), (0, end // 3)):
            want = consumer_rows(kafka, "varied", int(p), start, stop)
            got = read_rows(rd, "varied", {p: start}, {p: stop})
            assert got == want, (p, start, stop)
            assert [r["kafka_offset"] for r in got] == list(range(start, stop))
            seen |= {r["value"] for r in got}
    assert seen == {None if v is None else v.decode("utf-8", "replace") for v in VALUES}


def test_output_schema_and_batch_size(kafka, monkeypatch):
    from pidquota.sources.kafka import records
    from pidquota.sources.kafka.records import ARROW

    kafka.produce("sized", [f"r{i}" for i in range(250)], partitions=1)
    monkeypatch.setattr(records, "BATCH_ROWS", 100)
    rd = reader(kafka, "sized")
    (part,) = rd.partitions({"sized": {"0": 0}}, {"sized": {"0": 250}})
    batches = list(rd.read(part))
    assert all(b.schema == ARROW for b in batches) and max(b.num_rows for b in batches) <= 100
    assert [v for b in batches for v in b.column("value").to_pylist()] == [f"r{i}" for i in range(250)]


def test_a_broker_that_stops_answering_fails_the_read_clearly_then_it_resumes(gated_kafka):
    broker = gated_kafka
    try:
        broker.produce("stall", [f"s{i}" for i in range(20)], partitions=1)
        rd = reader(broker, "stall", fetchTimeoutMs="2000", requestTimeoutMs="1000")
        assert len(read_rows(rd, "stall", {"0": 0}, {"0": 10})) == 10  # leaves a connection idle
        broker.pause()
        t0 = time.monotonic()
        with pytest.raises(KafkaError, match=r"no data from stall-0 for 2 s .* is the broker up\?"):
            read_rows(rd, "stall", {"0": 10}, {"0": 20})
        assert time.monotonic() - t0 < 10
        broker.resume()
        assert [r["value"] for r in read_rows(rd, "stall", {"0": 10}, {"0": 20})] == [
            f"s{i}" for i in range(10, 20)
        ]
    finally:
        broker.resume()
