"""The Spark side of ``pidquota recommend``: the input read as the enforcer reads it, the
statistics in Spark SQL, and the what-if by the enforcer itself.

* **Statistics.** One pass of pidquota's own source (a file or folder, or a
  Kafka topic from ``pidquota.kafka.starting.offsets``) through the same
  screen and parse as the enforcer, run to the end (``availableNow``), writes
  the valid events to Parquet in a temporary folder. Spark SQL then computes
  what :func:`pidquota.recommend.stats.reference_stats` computes in pandas (a test
  compares the two): new sightings (first of a (principal, PID), or more than
  W after its previous one), their counts over the windows ``[k * slide,
  k * slide + W)`` that overlap each principal's span (empty ones count 0),
  exact p50 and p99 (Spark's ``percentile`` interpolates as numpy's
  "linear"), the peak over every window start, the distinct PIDs, and the PID
  lives of :func:`pidquota.recommend.stats.pid_lives` (per PID its first and last
  sighting and distinct timestamps; judged against the input's span).
* **What-if.** A second pass runs the real enforcer query
  (:func:`pidquota.streaming.query.enforcer`, ``--once``'s batching) with the candidate
  quotas, or with the quotas a function makes of the statistics (``recommend``'s own
  suggestion, so the second pass starts after the first), and writes its decisions to the
  temporary folder;
  :func:`pidquota.recommend.stats.what_if_summary` reads them. So the what-if of a
  quota file equals ``pidquota run --once`` with it.

The temporary folder is deleted at the end.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

import pidquota.formats as formats
from pidquota.quota import QuotaSettings, StaticQuotas
from pidquota.quota.client import SEP
from pidquota.recommend.stats import (
    DEFAULT_SHORT_LIFE_MS,
    LIFE_COLUMNS,
    STATS_COLUMNS,
    default_slide_ms,
    what_if_summary,
)
from pidquota.store.kafka import CLIENT_ID, KafkaUrl
from pidquota.streaming import query as q
from pidquota.streaming.outputs.reader import read_output
from pidquota.streaming.session import checkpoint_files


def compute(
    input_path: str,
    config,
    quotas,
    short_life_ms: int | Callable[[int], int] = DEFAULT_SHORT_LIFE_MS,
    say: Callable[[str], None] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """``(stats, what_if or None)`` for the events at ``input_path``; ``quotas``: the candidate
    ``{entity: rate}`` of --what-if, a function of the statistics that returns them, or
    None (no what-if); ``short_life_ms``: L of the PID lives, or a function of the input's
    span (ms) that gives it; ``say``: told each step as it
    starts, with the seconds since the first (the command's progress lines)."""
    from pidquota.streaming.session import spark_session

    started = time.monotonic()
    passes = 1 if quotas is None else 2

    def step(text: str) -> None:
        if say is not None:
            say(f"{text} ({time.monotonic() - started:.0f} s)")

    step("starting Spark")
    spark = spark_session(config)
    settings = QuotaSettings.from_config(config)
    work = Path(tempfile.mkdtemp(prefix="pidquota-recommend-"))
    try:
        step(f"pass 1 of {passes}: each user's statistics from {input_path}")
        lines = _lines(spark, input_path, config, work / "events-checkpoint")
        _run(_events(lines, config), work / "events")
        events = spark.read.parquet(str(work / "events"))
        if callable(short_life_ms):  # fitted to the input's span
            span = events.agg(F.max("timestamp") - F.min("timestamp")).first()[0]
            short_life_ms = short_life_ms(int(span or 0))
        stats = stats_frame(events, settings, short_life_ms).toPandas()[list(STATS_COLUMNS)]
        if callable(quotas):
            quotas = quotas(stats)
        what_if = None
        if quotas is not None:
            step(f"pass 2 of {passes}: what the quotas would throttle, by the enforcer itself")
            lines = _lines(spark, input_path, config, work / "what-if-checkpoint")
            what_if = what_if_summary(_enforce(lines, config, quotas, work / "what-if"))
        step("done")
        return stats, what_if
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _lines(spark, input_path: str, config, checkpoint: Path) -> DataFrame:
    """The input as the enforcer reads it, each pass from its own checkpoint."""
    screen = config["pidquota.principal.max.length"]
    if input_path.startswith("kafka://"):
        from pidquota.sources.kafka.source import KafkaSource

        spark.dataSource.register(KafkaSource)
        return q.kafka_source(spark, KafkaUrl.parse(input_path), config, screen=screen)
    max_files = config["pidquota.max.events.per.trigger"]
    return q.file_source(
        spark, input_path, max_files, str(checkpoint), screen=screen, fmt=q.input_format(config)
    )


def _events(lines: DataFrame, config) -> DataFrame:
    """Valid events only: principal, producer_id, timestamp (one row per sighting); not the
    PIDs of pidquota's own clients (the actuator's journal producer is no application)."""
    fmt = formats.get(config["pidquota.input.format"])
    rows = q.screened(lines, config["pidquota.principal.max.length"], fmt)
    valid = rows.where(F.col("dead").isNull() & (F.col("principal") != ""))
    named = F.arrays_zip(F.col("client_pids").alias("p"), F.col("clients").alias("c"))
    own = F.transform(F.filter(named, lambda n: n["c"].startswith(CLIENT_ID + SEP)), lambda n: n["p"])
    every = F.arrays_zip(F.col("producer_ids").alias("p"), F.col("timestamps").alias("t"))
    sightings = F.explode(F.filter(every, lambda s: ~F.array_contains(F.coalesce(own, F.array()), s["p"])))
    return valid.select("principal", sightings.alias("s")).select(
        "principal", F.col("s.p").alias("producer_id"), F.col("s.t").alias("timestamp")
    )


def _run(events: DataFrame, folder: Path) -> None:
    checkpoint = folder.with_name(folder.name + "-sink-checkpoint")
    checkpoint_files(events.sparkSession, str(checkpoint))  # as the enforcer's queries write theirs
    query = (
        events.writeStream.format("parquet")
        .option("path", str(folder))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def _enforce(lines: DataFrame, config, quotas, out: Path) -> pd.DataFrame:
    """The enforcer's decisions on ``lines`` under ``quotas``, as ``run --once`` makes them."""
    from pidquota.streaming.outputs.sink import JsonlSink

    checkpoint = str(out / "_checkpoint")
    query = q.start(q.enforcer(lines, config, StaticQuotas(quotas)), JsonlSink(out), checkpoint, True, 0)
    query.awaitTermination()
    return read_output(out, "decisions")


def stats_frame(
    events: DataFrame, settings: QuotaSettings, short_life_ms: int = DEFAULT_SHORT_LIFE_MS
) -> DataFrame:
    """:data:`STATS_COLUMNS` per principal from events (principal, producer_id, timestamp)."""
    w = settings.window_ms
    slide = default_slide_ms(w, settings.layer_count)
    ev = events.where(F.col("producer_id") >= 0).dropDuplicates(["principal", "producer_id", "timestamp"])
    previous = F.lag("timestamp").over(Window.partitionBy("principal", "producer_id").orderBy("timestamp"))
    new = (
        ev.withColumn("previous", previous)
        .where(F.col("previous").isNull() | (F.col("timestamp") - F.col("previous") > w))
        .select("principal", "timestamp")
    )
    return (
        _percentiles(new, w, slide)
        .join(_peaks(new, w), "principal")
        .join(ev.groupBy("principal").agg(F.countDistinct("producer_id").alias("active_pids")), "principal")
        .join(_lives(events, ev, short_life_ms), "principal")
        .select(*STATS_COLUMNS)
        .orderBy("principal")
    )


def _window(t, w: int, slide: int):
    """The first and last window index k (start k * slide) whose window holds time ``t``."""
    return F.floor((t - w) / slide) + 1, F.floor(t / slide)


def _percentiles(new: DataFrame, w: int, slide: int) -> DataFrame:
    """p50 and p99 over every window of each principal's span, empty windows as 0."""
    first, last = _window(F.col("timestamp"), w, slide)
    counts = (
        new.select("principal", F.explode(F.sequence(first, last)).alias("k"))
        .groupBy("principal", "k")
        .count()
    )
    span = new.groupBy("principal").agg(F.min("timestamp").alias("lo"), F.max("timestamp").alias("hi"))
    lo, _ = _window(F.col("lo"), w, slide)
    _, hi = _window(F.col("hi"), w, slide)
    windows = span.select("principal", F.explode(F.sequence(lo, hi)).alias("k"))
    filled = windows.join(counts, ["principal", "k"], "left").fillna(0, subset=["count"])
    pct = F.percentile(F.col("count").cast("double"), F.array(F.lit(0.5), F.lit(0.99)))
    return (
        filled.groupBy("principal")
        .agg(pct.alias("pct"))
        .select("principal", F.col("pct")[0].alias("p50"), F.col("pct")[1].alias("p99"))
    )


def _peaks(new: DataFrame, w: int) -> DataFrame:
    """The most new sightings in any window [s, s + W): one starting at a sighting holds it."""
    ahead = Window.partitionBy("principal").orderBy("timestamp").rangeBetween(0, w - 1)
    inside = new.withColumn("inside", F.count(F.lit(1)).over(ahead))
    return inside.groupBy("principal").agg(F.max("inside").cast("long").alias("max"))


def _lives(events: DataFrame, ev: DataFrame, life: int) -> DataFrame:
    """:func:`pidquota.recommend.stats.pid_lives`: per principal of ``ev`` (its sightings of PIDs
    >= 0, one per timestamp), its PIDs judged against the span of all ``events``, those that
    lived under ``life`` ms, and those seen at one timestamp (0 where none is judged)."""
    span = events.agg(F.min("timestamp").alias("lo"), F.max("timestamp").alias("hi"))
    per_pid = ev.groupBy("principal", "producer_id").agg(
        F.min("timestamp").alias("first"), F.max("timestamp").alias("last"), F.count(F.lit(1)).alias("n")
    )
    judged = per_pid.crossJoin(span).where(
        (F.col("first") + life <= F.col("hi")) & (F.col("last") >= F.col("lo") + life)
    )
    one = F.lit(1).cast("long")
    zero = F.lit(0).cast("long")
    counts = judged.groupBy("principal").agg(
        F.count(F.lit(1)).alias("judged_pids"),
        F.sum(F.when(F.col("last") - F.col("first") < life, one).otherwise(zero)).alias("short_lived_pids"),
        F.sum(F.when(F.col("n") == 1, one).otherwise(zero)).alias("one_request_pids"),
    )
    columns = list(LIFE_COLUMNS[1:])
    principals = ev.select("principal").distinct()
    return principals.join(counts, "principal", "left").fillna(0, subset=columns)
