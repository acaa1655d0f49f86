"""The Kafka source's read path without Spark: the old kafka-python consumer path
versus the new Fetch + numpy path, side by side in one run, on one core.

    python benchmarks/kafka_decode.py [--events 300000] [--repeat 3]

Starts Apache Kafka (scripts/kafka_broker.py) on a free port, produces
generated traffic (pidquota.traffic.generator) to a 1-partition and a 3-partition
topic, then reads each whole topic, partition after partition as Spark's input
partitions, through:

* ``old``: kafka-python's ``KafkaConsumer`` (per-record ``ConsumerRecord``s, CRC
  checks), each value decoded and the Arrow batch built from Python lists, as
  ``KafkaStreamReader.read`` did before ``sources/kafka/fetch.py``;
* ``new``: ``KafkaStreamReader.read`` as it is (Fetch requests, numpy decode).

Prints records/s of each (best of --repeat) and checks both yield identical
rows. Then, on the raw bytes of one Fetch response, the decoders alone:
kafka-python's ``MemoryRecords`` (with and without CRC checks) versus
``records.decode``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* from the root

from benchmarks.broker import start_kafka
from pidquota.traffic.generator import TrafficGenerator


def produce(bootstrap: str, topic: str, partitions: int, events: int) -> None:
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1)])
    admin.close()
    gen = TrafficGenerator(seed=7, rate=400)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=256 * 1024)
    sent, t0 = 0, time.perf_counter()
    while sent < events:
        _, lines, keys = gen.keyed_events(gen.now_ms + 60_000)
        for line, key in zip(lines[: events - sent], keys, strict=False):
            producer.send(topic, key=key.encode(), value=line.encode())
        sent += min(len(lines), events - sent)
    producer.flush()
    producer.close()
    print(
        f"produced {sent:,} events to {topic} ({partitions} partitions) in {time.perf_counter() - t0:.1f} s"
    )


def old_read(part) -> list[pa.RecordBatch]:
    """The read path before sources/kafka/fetch.py, condensed (same consumer settings)."""
    from kafka import TopicPartition

    from pidquota.sources.kafka.records import ARROW
    from pidquota.store.kafka import consumer

    tp = TopicPartition(part.topic, part.partition)
    c = consumer(
        part.options, request_timeout_ms=30_000, fetch_max_wait_ms=100, max_partition_fetch_bytes=4 << 20
    )
    c.assign([tp])
    c.seek(tp, part.start)
    values, offsets, stamps, pos = [], [], [], part.start
    while pos < part.end:
        for rec in c.poll(timeout_ms=500, max_records=10_000).get(tp, []):
            if rec.offset >= part.end:
                break
            values.append(rec.value.decode("utf-8", "replace") if rec.value is not None else None)
            offsets.append(rec.offset)
            stamps.append(rec.timestamp)
            pos = rec.offset + 1
    c.close()
    n = len(values)
    cols = [values, [tp.topic] * n, [tp.partition] * n, offsets, stamps]
    return [
        pa.RecordBatch.from_arrays(
            [pa.array(c, f.type) for c, f in zip(cols, ARROW, strict=True)], schema=ARROW
        )
    ]


def timed(read, parts, repeat: int) -> tuple[float, pa.Table]:
    best, table = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        batches = [b for part in parts for b in read(part)]
        best = min(best, time.perf_counter() - t0)
        table = pa.Table.from_batches(batches)
    return best, table


def compare_paths(bootstrap: str, topic: str, repeat: int) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pidquota.sources.kafka.source import KafkaStreamReader

    reader = KafkaStreamReader({"kafka.bootstrap.servers": bootstrap, "subscribe": topic})
    start = reader.initialOffset()
    parts = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
    old_s, old = timed(old_read, parts, repeat)
    new_s, new = timed(reader.read, parts, repeat)
    n = old.num_rows
    same = old.equals(new)
    print(
        f"  {topic:<8} {len(parts)} partition(s): old {n / old_s:>10,.0f} records/s   "
        f"new {n / new_s:>10,.0f} records/s   x{old_s / new_s:.1f}   identical rows: {same}"
    )
    if not same:
        raise SystemExit(f"the new path's rows differ from the old path's on {topic}")


def compare_decoders(bootstrap: str, topic: str, repeat: int) -> None:
    from kafka import TopicPartition
    from kafka.record import MemoryRecords

    from pidquota.sources.kafka import connection, fetch

    conn = connection.Connection({"kafka.bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    records = conn.fetch(tp, conn.leader(tp), 0, fetch.FETCH_BYTES).records
    conn.close()

    def memory_records(check_crc: bool) -> int:
        n, mr = 0, MemoryRecords(records)
        while (batch := mr.next_batch()) is not None:
            if check_crc:
                batch.validate_crc()
            for rec in batch:
                rec.value.decode("utf-8", "replace")
                n += 1
        return n

    for name, run in (
        ("kafka-python MemoryRecords + CRC", lambda: memory_records(True)),
        ("kafka-python MemoryRecords", lambda: memory_records(False)),
        ("records.decode (to Arrow)", lambda: sum(b.num_rows for b in _decoded(records))),
    ):
        best = n = 0
        for _ in range(repeat):
            t0 = time.perf_counter()
            n = run()
            secs = time.perf_counter() - t0
            best = max(best, n / secs)
        print(f"  {name:<34} {best:>10,.0f} records/s  ({n:,} records, {len(records) / 1e6:.1f} MB)")


def _decoded(records: bytes):
    from pidquota.sources.kafka import records

    return records.arrow_batches(records.decode(records, 0, 1 << 62), topic="t", partition=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    broker, bootstrap = start_kafka()
    try:
        produce(bootstrap, "events1", 1, args.events)
        produce(bootstrap, "events3", 3, args.events)
        print(f"whole topic, fetch + decode + Arrow, one core, best of {args.repeat}:")
        compare_paths(bootstrap, "events1", args.repeat)
        compare_paths(bootstrap, "events3", args.repeat)
        print("decoders alone, on one Fetch response:")
        compare_decoders(bootstrap, "events1", args.repeat)
    finally:
        broker.terminate()


if __name__ == "__main__":
    main()
