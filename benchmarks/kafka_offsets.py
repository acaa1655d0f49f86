"""The Kafka source's per-trigger cost on the driver: ``latestOffset``, without Spark.

    python benchmarks/kafka_offsets.py [--triggers 30] [--partitions 3]

Starts Apache Kafka (scripts/kafka_broker.py) on a free port, creates a topic
and calls ``KafkaStreamReader.latestOffset`` once per simulated trigger: first
with nothing new (an idle stream), then with a multi-record batch produced to
every partition before each call. Prints the median and worst time per call, and checks each
answer against the true end. No SparkSession is started.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* from the root

from benchmarks.broker import start_kafka


def report(name: str, secs: list[float]) -> None:
    ms = sorted(s * 1000 for s in secs)
    print(f"  {name:<34} median {statistics.median(ms):7.1f} ms   max {ms[-1]:7.1f} ms   ({len(ms)} calls)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--triggers", type=int, default=30)
    ap.add_argument("--partitions", type=int, default=3)
    args = ap.parse_args()
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pidquota.sources.kafka.source import KafkaStreamReader

    broker, bootstrap = start_kafka()
    work = tempfile.mkdtemp(prefix="pidquota-obench-")
    try:
        KafkaAdminClient(bootstrap_servers=bootstrap).create_topics([NewTopic("events", args.partitions, 1)])
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
        reader = KafkaStreamReader({"kafka.bootstrap.servers": bootstrap, "subscribe": "events"})
        start = reader.initialOffset()
        reader.latestOffset(start, ReadAllAvailable())  # warm: the driver's client is connected once
        idle = []
        for _ in range(args.triggers):
            t0 = time.perf_counter()
            reader.latestOffset(start, ReadAllAvailable())
            idle.append(time.perf_counter() - t0)
        busy, wrong, sent = [], 0, 0
        for _ in range(args.triggers):
            for p in range(args.partitions):
                for i in range(20):
                    producer.send("events", value=b"x%d" % i, partition=p)
            producer.flush()
            sent += 20
            t0 = time.perf_counter()
            end = reader.latestOffset(start, ReadAllAvailable())
            busy.append(time.perf_counter() - t0)
            wrong += any(v != sent for v in end["events"].values())
        reader.stop()
        producer.close()
        print(f"latestOffset on Apache Kafka, {args.partitions} partitions:")
        report("idle (nothing new)", idle)
        report("20-record batch per partition", busy)
        print(f"  answers that missed the true end: {wrong} of {args.triggers}")
    finally:
        broker.terminate()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
