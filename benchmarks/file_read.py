"""The file read ceiling: Spark's text source versus pidquota's file source.

    python benchmarks/file_read.py [--events 1000000] [--files 10]

Both read the same JSON-lines files, one file per micro-batch (availableNow),
into a noop sink, in one SparkSession, side by side; then the whole enforcer
runs on each source and the decisions are compared. pidquota reads files with
its own source (sources/files.py) for a fixed order and names Spark's
would skip; this prints what that costs. Asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* from the root

from benchmarks.streaming import write_input
from pidquota.conf.loader import load
from pidquota.quota import StaticQuotas


def spark_text(spark, folder: Path, work: Path):
    from pyspark.sql import functions as F

    lines = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(folder))
    return lines.select("value", F.col("_metadata.file_path").alias("source_file"))


def pidquota_files(spark, folder: Path, work: Path):
    from pidquota.streaming import query as q

    return q.file_source(spark, str(folder), 1, str(work / "ledger"))


def timed(frame, work: Path, name: str) -> float:
    start = time.perf_counter()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(work / f"ck-{name}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - start


def decisions(spark, lines, work: Path, name: str, config, quotas):
    from pidquota.streaming import query as q
    from pidquota.streaming.outputs.sink import JsonlSink

    out = work / f"out-{name}"
    sink = JsonlSink(out)
    q.start(q.enforcer(lines, config, quotas), sink, str(out / "_ck"), True, 0, name=name).awaitTermination()
    rows = []
    for f in sorted((out / "decisions").glob("part-*.jsonl")):
        rows += f.read_text().splitlines()
    return sorted(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=10)
    args = ap.parse_args()
    from pidquota.streaming.session import spark_session

    config = load()
    spark = spark_session(config)
    work = Path(tempfile.mkdtemp(prefix="pidquota-read-"))
    try:
        folder = work / "in"
        write_input(folder, args.events, args.files, flood=False)
        for name, source in (("warm-spark", spark_text), ("warm-pidquota", pidquota_files)):
            timed(source(spark, folder, work / name), work, name)
        rates = {}
        for name, source in (("spark text source", spark_text), ("pidquota-files", pidquota_files)):
            secs = timed(source(spark, folder, work / name.split()[0]), work, name.split()[0])
            rates[name] = args.events / secs
            print(f"{name:<18} {rates[name]:>10,.0f} events/s ({secs:.1f} s, noop sink)")
        print(
            f"ratio pidquota-files / spark text: {rates['pidquota-files'] / rates['spark text source']:.2f}"
        )
        quotas = StaticQuotas({"<default>": 100})
        a = decisions(spark, spark_text(spark, folder, work), work, "d-spark", config, quotas)
        b = decisions(spark, pidquota_files(spark, folder, work / "d"), work, "d-pidquota", config, quotas)
        same = [x.rsplit(',"batch_id"', 1)[0] for x in a] == [x.rsplit(',"batch_id"', 1)[0] for x in b]
        print(f"enforcer decisions identical on both sources: {same} ({len(a):,} decisions)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    main()
