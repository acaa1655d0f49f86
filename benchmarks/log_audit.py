"""The log audit (``--input-format record-batches``): batch headers per second, and events
per second through the enforcer, beside the same records read as JSON events.

    python benchmarks/log_audit.py [--batches 200000] [--records 5] [--events 200000]

1. **Headers alone**, one core, no Spark, no broker: ``--batches`` record batches of
   ``--records`` records each, zstd-flagged (their bodies are never decompressed), walked
   and read by their headers (``records.walk`` + ``records.batch_headers``), then folded by
   the audit's screen (``AuditScreen``): batch headers/s.
2. **Through the enforcer**, on Apache Kafka, side by side in one SparkSession: the
   generator's traffic (``--events``, 3 partitions) read once as JSON events (every record
   decoded and parsed) and once as record batches (headers only): events/s of each, the
   batches the audit saw, and how many PIDs each decided.

Asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* from the root

from benchmarks.broker import start_kafka
from pidquota.conf.loader import load
from pidquota.formats.record_batches import AuditScreen
from pidquota.quota import StaticQuotas
from pidquota.sources.kafka.records import ARROW, batch_headers, walk
from pidquota.store.owners import Owners
from pidquota.traffic.generator import TrafficGenerator

T0 = 1_767_225_600_000


def _batches(n: int, records: int) -> bytes:
    """``n`` magic-2 batches, zstd-flagged, with 40 bytes of body each (never decompressed)."""
    rng = np.random.default_rng(7)
    pids = rng.integers(0, n // 10 + 1, n)
    out, body = [], b"\x00" * 40
    for i in range(n):
        header = struct.pack(
            ">ibIhiqqqhii", 0, 2, 0, 4, records - 1, T0 + i, T0 + i + 3, int(pids[i]), 0, 0, records
        )
        out.append(struct.pack(">qi", i * records, len(header) + len(body)) + header + body)
    return b"".join(out)


def _with_topic(headers):
    import pyarrow as pa

    topic = pa.repeat(pa.scalar("orders"), headers.num_rows)
    part = pa.repeat(pa.scalar(0, pa.int32()), headers.num_rows)
    return headers.append_column("kafka_topic", topic).append_column("kafka_partition", part)


def headers_alone(n: int, records: int) -> None:
    data = _batches(n, records)
    screen = AuditScreen(Owners({"orders": "User:a"}), ARROW)
    list(screen.screen(_with_topic(batch_headers(walk(_batches(100, records), 0, 10**9)))))  # warm: imports
    start = time.perf_counter()
    walked = walk(data, 0, n * records)  # as the source's read does, for the next offset
    mid = time.perf_counter()
    rows = sum(b.num_rows for b in screen.screen(_with_topic(batch_headers(walked))))
    took = time.perf_counter() - start
    print(
        f"headers alone, one core: {n / took / 1e6:.2f} M batch headers/s ({n:,} batches, {took:.2f} s, of "
        f"which the walk for the next offset {mid - start:.2f} s; {rows:,} rows out)"
    )


def _produce(bootstrap: str, events: int) -> int:
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    KafkaAdminClient(bootstrap_servers=bootstrap).create_topics([NewTopic("events", 3, 1)])
    gen = TrafficGenerator(seed=7, rate=400)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=50, batch_size=64 * 1024, enable_idempotence=True
    )
    sent = 0
    while sent < events:
        _, lines, keys = gen.keyed_events(gen.now_ms + 60_000)
        for line, key in zip(lines[: events - sent], keys, strict=False):
            producer.send("events", key=key.encode(), value=line.encode())
        sent += min(len(lines), events - sent)
    producer.flush()
    producer.close()
    return sent


def through_the_enforcer(events: int) -> None:
    from pidquota.sources.kafka.source import KafkaSource
    from pidquota.store.kafka import KafkaUrl
    from pidquota.streaming import query as q
    from pidquota.streaming.outputs.reader import read_output
    from pidquota.streaming.outputs.sink import JsonlSink
    from pidquota.streaming.session import spark_session

    broker, bootstrap = start_kafka()
    work = Path(tempfile.mkdtemp(prefix="pidquota-audit-bench-"))
    try:
        sent = _produce(bootstrap, events)
        base = {"pidquota.spark.shuffle.partitions": "2", "pidquota.max.events.per.trigger": "0"}
        spark = spark_session(load(overrides=base, environ={}))
        spark.dataSource.register(KafkaSource)
        url = KafkaUrl.parse(f"kafka://{bootstrap}/events")
        quotas = StaticQuotas({"<default>": 200})
        took = {}
        for name, fmt in (("warm", "events"), ("events", "events"), ("audit", "record-batches")):
            config = load(overrides={**base, "pidquota.input.format": fmt}, environ={})
            out = work / name
            lines = q.kafka_source(spark, url, config, screen=256)
            start = time.perf_counter()
            q.start(
                q.enforcer(lines, config, quotas), JsonlSink(out), str(out / "_ck"), True, 0
            ).awaitTermination()
            took[name] = (
                time.perf_counter() - start,
                read_output(out, "decisions"),
                read_output(out, "metrics"),
            )
        t_ev, d_ev, _ = took["events"]
        t_au, d_au, m_au = took["audit"]
        batches = int(m_au["events"].sum()) if len(m_au) else 0
        print(
            f"enforcer, JSON events from Kafka: {sent / t_ev / 1e3:8.1f} k events/s ({t_ev:.1f} s), {len(d_ev):,} decisions"
        )
        print(
            f"enforcer, record batches (audit): {sent / t_au / 1e3:8.1f} k events/s ({t_au:.1f} s), "
            f"{batches:,} batches seen, {len(d_au):,} decisions"
        )
        print(f"  ratio audit / events: {t_ev / t_au:.2f}")
        spark.stop()
    finally:
        broker.terminate()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=200_000)
    ap.add_argument("--records", type=int, default=5)
    ap.add_argument("--events", type=int, default=200_000)
    args = ap.parse_args()
    headers_alone(args.batches, args.records)
    through_the_enforcer(args.events)


if __name__ == "__main__":
    main()
