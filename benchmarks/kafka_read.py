"""Reading from Kafka, stage by stage, side by side in one run.

    python benchmarks/kafka_read.py [--events 300000]

Starts Apache Kafka (scripts/kafka_broker.py) on a free port, produces
generated traffic to a topic (3 partitions), then reads the whole topic with
``availableNow`` (100,000 records a batch) three times: the source alone
(fetch, decode, Arrow; noop sink), the parse (the source screens its records,
then the strict parse of what it leaves; noop sink) and the whole enforcer
with its JSON-lines sink. The source and the enforcer run read_uncommitted and
read_committed (the default, whose driver reads every batch's header a second
time for the transaction markers), side by side. Asserts nothing.

``--spark-connector VERSION`` also reads the topic with Spark's own Kafka connector
(``spark-sql-kafka-0-10_2.13`` at VERSION, fetched from Maven Central with mvn into
``~/.cache/pidquota``; Maven Central may not serve the version of the pyspark in use, and a
connector of another Spark version may not load), beside pidquota's source alone.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* from the root

from benchmarks.broker import start_kafka
from pidquota.conf.loader import load
from pidquota.quota import StaticQuotas
from pidquota.traffic.generator import TrafficGenerator

CONNECTOR_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>pidquota</groupId><artifactId>spark-kafka-connector</artifactId><version>1</version>
<packaging>pom</packaging><dependencies><dependency><groupId>org.apache.spark</groupId>
<artifactId>spark-sql-kafka-0-10_2.13</artifactId><version>{version}</version></dependency>
</dependencies></project>"""


def connector_jars(version: str) -> list[str]:
    """Spark's Kafka connector and what it needs beyond Spark itself, from Maven Central."""
    import os
    import subprocess

    base = Path(os.environ.get("PIDQUOTA_KAFKA_CACHE") or Path.home() / ".cache" / "pidquota")
    libs = base / f"spark-sql-kafka-{version}"
    if not (libs / ".complete").exists():
        libs.mkdir(parents=True, exist_ok=True)
        (libs / "pom.xml").write_text(CONNECTOR_POM.format(version=version))
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(libs / "pom.xml"), "dependency:copy-dependencies",
             f"-DoutputDirectory={libs}", "-DincludeScope=runtime"],
            check=True,
        )  # fmt: skip
        (libs / ".complete").write_text(version)
    return sorted(str(j) for j in libs.glob("*.jar"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--spark-connector", metavar="VERSION", help="also read with Spark's Kafka connector")
    args = ap.parse_args()
    if args.spark_connector:
        import os

        jars = ",".join(connector_jars(args.spark_connector))
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {jars} pyspark-shell"
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    from pidquota.sources.kafka.source import KafkaSource
    from pidquota.store.kafka import KafkaUrl
    from pidquota.streaming import query as q
    from pidquota.streaming.outputs.sink import JsonlSink
    from pidquota.streaming.session import spark_session

    broker, bootstrap = start_kafka()
    work = Path(tempfile.mkdtemp(prefix="pidquota-kbench-"))
    try:
        KafkaAdminClient(bootstrap_servers=bootstrap).create_topics([NewTopic("events", 3, 1)])
        gen = TrafficGenerator(seed=7, rate=400)
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=256 * 1024)
        sent, t0 = 0, time.perf_counter()
        while sent < args.events:
            _, lines, keys = gen.keyed_events(gen.now_ms + 60_000)
            for line, key in zip(lines[: args.events - sent], keys, strict=False):
                producer.send("events", key=key.encode(), value=line.encode())
            sent += min(len(lines), args.events - sent)
        producer.flush()
        print(f"produced {sent:,} events to Kafka in {time.perf_counter() - t0:.1f} s")

        config = load(environ={}, overrides={"pidquota.max.events.per.trigger": "100000"})
        spark = spark_session(config)
        spark.dataSource.register(KafkaSource)
        topic = KafkaUrl.parse(f"kafka://{bootstrap}/events")
        quotas = StaticQuotas.from_file(config.quotas_path())

        committed = {
            level: load(
                environ={},
                overrides={
                    "pidquota.max.events.per.trigger": "100000",
                    "pidquota.kafka.isolation.level": level,
                },
            )
            for level in ("read_uncommitted", "read_committed")
        }

        def timed(name, build, real_sink=False, screen=0, level="read_committed"):
            lines = q.kafka_source(spark, topic, committed[level], screen=screen)
            out = work / name.replace(" ", "-")
            writer = build(lines).writeStream.option("checkpointLocation", str(out / "_ck"))
            writer = writer.foreachBatch(JsonlSink(out)) if real_sink else writer.format("noop")
            start = time.perf_counter()
            query = writer.trigger(availableNow=True).start()
            query.awaitTermination()
            secs = time.perf_counter() - start
            # every stage reads the whole topic (Spark's numInputRows counts folded rows once screened)
            print(f"  {name:<27} {sent / secs:>10,.0f} events/s  ({sent:,} events in {secs:.1f} s)")
            return sent / secs

        limit = config["pidquota.principal.max.length"]
        timed("warm-up", lambda lines: q.screened(lines, limit), screen=limit)
        rates = {}
        for level in ("read_uncommitted", "read_committed"):  # fetch, decode, Arrow: every record as a line
            rates[level] = timed(f"source, {level}", lambda lines: lines, level=level)
        if args.spark_connector:
            rates["spark"] = spark_connector(spark, bootstrap, sent, work)
            print(
                f"  Spark's connector / pidquota's source (read_uncommitted): "
                f"{rates['spark'] / rates['read_uncommitted']:.2f}"
            )
        timed("parse", lambda lines: q.screened(lines, limit), screen=limit)
        for level in ("read_uncommitted", "read_committed"):
            e = timed(
                f"enforcer, {level}", lambda lines: q.enforcer(lines, config, quotas), True, limit, level
            )
            rates[f"enforcer {level}"] = e
        print(
            f"  read_committed / read_uncommitted: source {rates['read_committed'] / rates['read_uncommitted']:.2f}, "
            f"enforcer {rates['enforcer read_committed'] / rates['enforcer read_uncommitted']:.2f}"
        )
        print(f"  enforcer from Kafka: {e:,.0f} events/s (target 150,000 on 2 cores)")
        print("ROW kafka " + json.dumps({"enforcer": e}))  # for benchmarks/streaming.py --all
        spark.stop()
    finally:
        broker.terminate()
        shutil.rmtree(work, ignore_errors=True)


def spark_connector(spark, bootstrap: str, sent: int, work: Path) -> float:
    """The topic read by Spark's own Kafka connector, every value cast to a string (what
    pidquota's source hands on), 100,000 records a batch, into the noop sink."""
    lines = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 100_000)
        .load()
        .selectExpr("CAST(value AS STRING) AS value", "topic", "partition", "offset", "timestamp")
    )
    writer = lines.writeStream.format("noop").option("checkpointLocation", str(work / "spark-kafka" / "_ck"))
    start = time.perf_counter()
    writer.trigger(availableNow=True).start().awaitTermination()
    secs = time.perf_counter() - start
    print(f"  {'Spark connector':<27} {sent / secs:>10,.0f} events/s  ({sent:,} events in {secs:.1f} s)")
    return sent / secs


if __name__ == "__main__":
    main()
