"""Where the time goes, stage by stage, on the same input in one run.

    python benchmarks/streaming.py [--events 1000000] [--files 10] [--rounds 1]

Each input is ``--events`` JSON-lines events in ``--files`` files, read one
file per micro-batch (availableNow) in one SparkSession. For each input it
prints events/s of:

- **read, Spark text**: Spark's own text source into a noop sink (what a Spark
  user's read costs);
- **read**: pidquota's file source into a noop sink (the read ceiling);
- **parse, strict**: every line through Spark's strict VARIANT parse, noop sink
  (the parse before the screen);
- **parse**: the screen (formats/events.py) plus the strict parse of what
  it leaves, folded, noop sink;
- **native**: what a Spark user would write instead: typed ``from_json``, a
  watermark, ``approx_count_distinct(producer_id)`` per principal over
  60-minute windows sliding by 15 minutes, update mode, noop sink (the anchor);
- **floor**: the enforcer's query with an operator that does nothing (the same
  read, screen, fold, shuffle and ``applyInPandasWithState``), noop sink: what
  the enforcer would reach with a free quota core and a free sink;
- **enforcer, noop sink**: the enforcer's query into a noop sink (the difference to the
  next row is what the driver's sink costs: the collect and the JSON-lines files);
- **enforcer**: the whole enforcer with its real JSON-lines sink;
- **enforcer, before**: the enforcer as it was before the speed-ups: every
  line through the strict parse, one operator group per principal
  (``pidquota.state.buckets=0``). Its decisions must be identical;

then enforcer/native (the headline ratio), floor/native and enforcer/floor, the batch
times, and the state's size at the end. Every rate is given twice: over the whole run
(what a start costs: the JVM's code compiled, Python workers started) and in steady
state, the events over the batch times of the batches after the first three (what a
stream that runs for weeks sustains; ``--files 20`` gives it more batches). ``--rounds 2`` runs
every stage twice in turn and keeps each one's fastest run: on a 2-core machine a stage's time
moves by up to a fifth from one run to the next. Two inputs: realistic PID reuse, and a flood where every
event is a new PID. Last, the rows of issue 23's table this run measures:
both ratios, pidquota's file source against Spark's text source, and the quota
core alone on a flood (``benchmarks/core.py``'s, one principal, one core).
With ``--all`` it then runs the scripts of the other rows, one after another, each in
its own process (``kafka_read.py``: Kafka input; ``latency.py``: p99 at half the
maximum rate; ``state_scale.py``: 1M principals, a batch touching 1%, in both state
layouts) and prints the whole table. That takes about half an hour. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* from the root

from benchmarks import core  # noqa: E402
from pidquota.conf.loader import Config, load  # noqa: E402
from pidquota.quota import StaticQuotas  # noqa: E402

EVENT_SCHEMA = "timestamp long, principal string, producer_id long, producer_epoch int"
HERE = Path(__file__).resolve().parent
# issue 23's rows that other scripts measure (--all): script and arguments; each prints "ROW <name> <json>"
OTHERS = {
    "kafka": ["kafka_read.py"],
    "latency": ["latency.py", "--seconds", "60"],
    "state": [
        "state_scale.py", "--principals", "1000000", "--stores", "rocksdb", "--batches", "4",
        "--touch", "0.01", "--driver-memory", "4g", "--layouts", "groups", "principals",
    ],
}  # fmt: skip


def traffic(n: int, flood: bool, seed: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` events over 2 hours from 500 principals, sorted by time: (timestamps, principal
    numbers, producer ids). The flood: every event a new PID; else each principal has 8
    long-lived producers and 1% of events are fresh PIDs."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(1_767_225_600_000, 1_767_225_600_000 + 2 * 3_600_000, n))
    principal = rng.integers(0, 500, n)
    if flood:
        pid = np.arange(n) + 10_000_000
    else:
        pid = principal * 100 + rng.integers(0, 8, n)
        fresh = rng.random(n) < 0.01
        pid[fresh] = 50_000_000 + np.arange(fresh.sum())
    return ts, principal, pid


def write_input(folder: Path, n: int, files: int, flood: bool, seed: int = 7, clients: bool = False) -> None:
    """:func:`traffic` in ``files`` files of JSON lines; with ``clients``, each event names its
    client (4 client.ids per principal) and broker (6)."""
    ts, principal, pid = traffic(n, flood, seed)
    folder.mkdir(parents=True)
    for k, idx in enumerate(np.array_split(np.arange(n), files)):
        with open(folder / f"part-{k:03d}.jsonl", "w") as f:
            for t, p, q in zip(ts[idx].tolist(), principal[idx].tolist(), pid[idx].tolist(), strict=True):
                event = {"timestamp": t, "principal": f"User:u{p}", "producer_id": q, "producer_epoch": 0}
                if clients:
                    event.update(client_id=f"app-{p}-{q % 4}", broker_id=q % 6)
                f.write(json.dumps(event) + "\n")


def native(lines, config):
    """The anchor: Spark's own approximate distinct count per principal and window."""
    from pyspark.sql import functions as F

    delay = config["pidquota.watermark.delay.ms"]
    events = lines.select(F.from_json("value", EVENT_SCHEMA).alias("e")).select("e.*")
    events = events.withColumn("t", F.timestamp_millis("timestamp")).withWatermark(
        "t", f"{delay} milliseconds"
    )
    return events.groupBy(F.window("t", "60 minutes", "15 minutes"), "principal").agg(
        F.approx_count_distinct("producer_id").alias("pids")
    )


def floor(lines, config):
    """The enforcer's query (the default ``groups`` state layout) with an operator that does
    nothing: the same read, screen, fold, shuffle and ``applyInPandasWithState``, but the
    operator reads its input and keeps and emits nothing. What the query costs before the
    quota does any work."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    from pidquota.streaming import query as q
    from pidquota.streaming.schema import OPERATOR_SCHEMA, STATE_SCHEMA

    def idle(key, pdfs, state):
        for _ in pdfs:
            pass
        yield from ()

    grouped = q.operator_input(lines, config)
    return grouped.applyInPandasWithState(
        idle, OPERATOR_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout
    )


TEXT = "text"  # a stage that reads with Spark's text source instead of pidquota's


def stages(config, quotas):
    """name -> (frame builder from lines, uses the real sink, the source screens its lines)."""
    from pidquota.streaming import query as q

    max_principal = config["pidquota.principal.max.length"]
    before = Config({**config.values, "pidquota.state.buckets": 0}, config.origins)
    return {
        "read, Spark text": (lambda lines: lines, False, TEXT),
        "read": (lambda lines: lines, False, False),
        "parse, strict": (lambda lines: q.strict(lines, max_principal), False, False),
        "parse": (lambda lines: q.screened(lines, max_principal), False, True),
        "native": (lambda lines: native(lines, config), False, False),
        "floor": (lambda lines: floor(lines, config), False, True),
        "enforcer, noop sink": (lambda lines: q.enforcer(lines, config, quotas), False, True),
        "enforcer": (lambda lines: q.enforcer(lines, config, quotas), True, True),
        "enforcer, before": (lambda lines: q.enforcer(lines, before, quotas, screen=False), True, False),
    }


def run_stage(spark, config, name: str, stage: tuple, folder: Path, work: Path) -> dict:
    from pidquota.streaming import query as q
    from pidquota.streaming.outputs.sink import JsonlSink
    from pidquota.streaming.session import checkpoint_files

    build, real_sink, screened = stage
    out = work / f"{folder.name}-{name.replace(', ', '-').replace(' ', '-')}"
    if screened == TEXT:
        lines = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(folder))
        if real_sink:  # the enforcer's: each line's file, for its dead letter, as pidquota's source gives
            lines = lines.select("value", lines["_metadata.file_path"].alias("source_file"))
    else:
        screen = config["pidquota.principal.max.length"] if screened else 0  # as the CLI does
        lines = q.file_source(spark, str(folder), 1, str(out / "_ck"), screen=screen)
    frame = build(lines)
    # every stage's checkpoint files written alike, as pidquota's queries write theirs
    # (streaming/session.py: checkpoint_files): the ratios compare the queries, not the file managers
    checkpoint_files(spark, str(out / "_ck"))
    writer = frame.writeStream.option("checkpointLocation", str(out / "_ck")).trigger(availableNow=True)
    if real_sink:
        writer = writer.foreachBatch(JsonlSink(out))
    else:
        writer = writer.format("noop").outputMode("update" if name == "native" else "append")
    start = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    secs = time.perf_counter() - start
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    state = query.lastProgress.get("stateOperators") or [{}]
    return {
        "secs": secs,
        "durations": [p["batchDuration"] for p in progress],
        "state_rows": state[0].get("numRowsTotal"),
        "state_bytes": state[0].get("memoryUsedBytes"),
        "decisions": _decisions(out) if real_sink else None,
    }


def _decisions(out: Path) -> list[str]:
    rows = []
    for f in sorted((out / "decisions").glob("part-*.jsonl")):
        rows += [line.rsplit(',"batch_id"', 1)[0] for line in f.read_text().splitlines()]
    return sorted(rows)


WARM_BATCHES = 3  # batches a stage's steady state leaves out: the JIT's and the workers' start


def steady(r: dict, n: int, warm: int = WARM_BATCHES) -> float | None:
    """A stage's events/s in steady state: the events of its batches over their times, the
    first ``warm`` batches left out (None: no batch after them). Every batch is one file of
    the ``n`` events' equal shares (Spark's input rows would not do: pidquota's source hands
    the screened stages a row per chunk of lines, not per event). A stream runs for weeks; the
    whole run's rate, beside it, also counts the start (JVM code compiled, workers started).
    Example: 10 batches of 100k events, the first three 3 s each and the rest 1 s each: 100k
    events/s steady, 62.5k over the whole run."""
    batches = len(r["durations"])
    ms = sum(r["durations"][warm:])
    return n / batches * (batches - warm) / (ms / 1000) if ms and batches > warm else None


def best_of(spark, config, quotas, folder: Path, work: Path, rounds: int) -> dict[str, dict]:
    """Every stage on ``folder``, ``rounds`` times in turn (each round with outputs of its own,
    kept until the end: a finished query's state store may still be writing its snapshot);
    per stage, its fastest run over the whole of it."""
    best: dict[str, dict] = {}
    for i in range(rounds):
        where = work / f"round-{i}"
        for k, st in stages(config, quotas).items():
            r = run_stage(spark, config, k, st, folder, where)
            if k not in best or r["secs"] < best[k]["secs"]:
                best[k] = r
    if rounds > 1:
        print(f"\n(each stage's fastest of {rounds} rounds)")
    return best


def report(name: str, n: int, res: dict) -> dict[str, float]:
    print(
        f"\n[{name}]  events/s over the whole run; in steady state (batches after the first {WARM_BATCHES})"
    )
    for stage, r in res.items():
        p50, p99 = np.percentile(r["durations"], 50), np.percentile(r["durations"], 99)
        state = (
            f"; state {r['state_rows']:,} rows, {r['state_bytes'] / 2**20:.1f} MiB" if r["state_rows"] else ""
        )
        still = steady(r, n)
        print(
            f"  {stage:<20} {n / r['secs']:>10,.0f} events/s; steady {still or 0:>10,.0f}  ({r['secs']:6.1f} s; "
            f"batch p50 {p50 / 1000:.2f} s, p99 {p99 / 1000:.2f} s{state})"
        )
    rate = {k: n / r["secs"] for k, r in res.items()}
    still = {k: steady(r, n) or float("nan") for k, r in res.items()}
    for top, bottom, what in (
        ("enforcer", "native", ""),
        ("floor", "native", " (what a free operator and sink would reach)"),
        ("enforcer", "floor", " (how close the enforcer is to its floor)"),
    ):
        print(
            f"  {top} / {bottom}: {rate[top] / rate[bottom]:.2f} whole run, "
            f"{still[top] / still[bottom]:.2f} steady{what}"
        )
    sink = res["enforcer"]["secs"] - res["enforcer, noop sink"]["secs"]
    ms = sum(res["enforcer"]["durations"][WARM_BATCHES:]) - sum(
        res["enforcer, noop sink"]["durations"][WARM_BATCHES:]
    )
    steady_ms = sum(res["enforcer"]["durations"][WARM_BATCHES:]) or 1
    print(
        f"  the sink's share of the enforcer's time: {sink / res['enforcer']['secs']:.0%} whole run, "
        f"{ms / steady_ms:.0%} steady"
    )
    print(f"  parse / parse, strict: {rate['parse'] / rate['parse, strict']:.2f}")
    same = res["enforcer"]["decisions"] == res["enforcer, before"]["decisions"]
    print(f"  enforcer / enforcer before: {rate['enforcer'] / rate['enforcer, before']:.2f}")
    print(f"  decisions identical to before: {same} ({len(res['enforcer']['decisions']):,} decisions)")
    return rate


def clients_cost(n: int, files: int) -> None:
    """The enforcer and the native anchor on the flood, its events without and with their
    client (client_id, broker_id: what the decisions then carry), side by side, twice."""
    from pidquota.streaming.session import spark_session

    config = load()
    quotas = StaticQuotas({"<default>": 100})
    spark = spark_session(config)
    work = Path(tempfile.mkdtemp(prefix="pidquota-bench-"))
    chosen = {k: v for k, v in stages(config, quotas).items() if k in ("native", "enforcer")}
    try:
        warm = work / "warmup"
        write_input(warm, 20_000, 2, flood=True, clients=True)
        for name, stage in chosen.items():
            run_stage(spark, config, name, stage, warm, work)
        rates: dict[str, list[float]] = {}
        for named in (False, True):
            write_input(work / f"flood-{named}", n, files, flood=True, clients=named)
        for round_ in range(2):
            for named in (False, True):
                folder = work / f"flood-{named}"
                for name, stage in chosen.items():
                    r = run_stage(spark, config, name, stage, folder, work / f"r{round_}")
                    rates.setdefault(f"{name}, clients {named}", []).append(n / r["secs"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    for key, values in rates.items():
        print(f"  {key:<24} " + ", ".join(f"{v:,.0f}" for v in values) + " events/s")
    best = {k: max(v) for k, v in rates.items()}
    print(
        f"  enforcer / native, no clients: {best['enforcer, clients False'] / best['native, clients False']:.2f}; "
        f"with clients: {best['enforcer, clients True'] / best['native, clients True']:.2f}; "
        f"enforcer with / without: {best['enforcer, clients True'] / best['enforcer, clients False']:.2f}"
    )


def text_lever(n: int, files: int) -> None:
    """Issue 43 §2's first lever: the enforcer reading files with Spark's text source (the
    screen then runs as a ``mapInArrow`` after it) against pidquota's own file source, each
    next to the native anchor, on both inputs, alternating twice; decisions compared."""
    from pidquota.streaming import query as q
    from pidquota.streaming.session import spark_session

    config = load()
    quotas = StaticQuotas({"<default>": 100})
    spark = spark_session(config)
    work = Path(tempfile.mkdtemp(prefix="pidquota-bench-"))
    chosen = {
        "native": stages(config, quotas)["native"],
        "enforcer": stages(config, quotas)["enforcer"],
        "enforcer, Spark text": (lambda lines: q.enforcer(lines, config, quotas), True, TEXT),
    }
    try:
        _alternate(spark, config, chosen, n, files, work, "enforcer, Spark text")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()


def spark_parsed(lines, config, operator=None):
    """Issue 43 §2's second lever: Spark parses (``from_json``, typed) and hands the stateful
    operator one row per event, unfolded (a one-sighting array each, as the query's strict
    path does): no Python before the shuffle. Every line is taken for an event, as every line
    of these inputs is, so this bounds the lever from above (a real one would still send the
    lines ``from_json`` cannot vouch for to the screen). ``operator``: the real one when given,
    else one that does nothing (as :func:`floor`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from pidquota.streaming.query import COMPACT_COLUMNS, state_group
    from pidquota.streaming.schema import OPERATOR_SCHEMA, STATE_SCHEMA

    e = lines.select(F.from_json("value", EVENT_SCHEMA).alias("e")).select("e.*")
    delay = config["pidquota.watermark.delay.ms"]
    rows = e.select(
        "principal",
        *(F.array(c).alias(a) for c, a in (("producer_id", "producer_ids"), ("timestamp", "timestamps"))),
        F.array("producer_epoch").alias("epochs"),
        F.lit(None).cast("array<long>").alias("client_pids"),
        F.lit(None).cast("array<string>").alias("clients"),
        F.lit(None).cast("string").alias("dead"),
        F.col("timestamp").alias("max_ts"),
    )
    rows = rows.withColumn("event_time", F.timestamp_millis("max_ts")).withWatermark(
        "event_time", f"{delay} milliseconds"
    )
    guard = F.lit(None).cast("timestamp").alias("late_guard", metadata={"spark.watermarkDelayMs": delay})
    group = state_group(config["pidquota.state.buckets"]).alias("group")
    grouped = rows.select(group, *COMPACT_COLUMNS, guard).groupBy("group")

    def idle(key, pdfs, state):
        for _ in pdfs:
            pass
        yield from ()

    return grouped.applyInPandasWithState(
        operator or idle, OPERATOR_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout
    )


def spark_parse_lever(n: int, files: int) -> None:
    """The floor and the enforcer with Spark parsing (:func:`spark_parsed`, on Spark's text
    source) against pidquota's source, which screens and folds in Python before the shuffle,
    beside the native anchor; both inputs, alternating twice; decisions compared."""
    from pidquota.quota import QuotaSettings
    from pidquota.streaming.operator import make_state_function
    from pidquota.streaming.session import spark_session

    config = load()
    quotas = StaticQuotas({"<default>": 100})
    spark = spark_session(config)
    work = Path(tempfile.mkdtemp(prefix="pidquota-bench-"))
    judge = make_state_function(quotas, QuotaSettings.from_config(config))
    ours = stages(config, quotas)
    chosen = {
        "native": ours["native"],
        "floor": ours["floor"],
        "floor, Spark parse": (lambda lines: spark_parsed(lines, config), False, TEXT),
        "enforcer, noop sink": ours["enforcer, noop sink"],
        "enforcer": ours["enforcer"],
        "enforcer, Spark parse": (lambda lines: spark_parsed(lines, config, judge), True, TEXT),
    }
    try:
        _alternate(spark, config, chosen, n, files, work, "enforcer, Spark parse")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()


def _alternate(spark, config, chosen: dict, n: int, files: int, work: Path, other: str) -> None:
    """Each stage of ``chosen`` on both inputs, alternating twice after a warm-up; events/s and
    the ratio of each stage's best to native's best; the enforcer's decisions against ``other``'s."""
    warm = work / "warmup"
    write_input(warm, 20_000, 2, flood=True)
    for name, stage in chosen.items():
        run_stage(spark, config, name, stage, warm, work)
    for flood in (True, False):
        folder = work / ("flood" if flood else "realistic")
        write_input(folder, n, files, flood=flood)
        rates: dict[str, list[float]] = {}
        decided = {}
        for round_ in range(2):
            for name, stage in chosen.items():
                r = run_stage(spark, config, name, stage, folder, work / f"r{round_}")
                rates.setdefault(name, []).append(n / r["secs"])
                decided[name] = r["decisions"]
        print(f"[{folder.name}]")
        for key, values in rates.items():
            ratio = max(values) / max(rates["native"])
            print(
                f"  {key:<22} " + ", ".join(f"{v:,.0f}" for v in values) + f" events/s; / native {ratio:.2f}"
            )
        same = decided["enforcer"] == decided[other]
        print(f"  decisions identical: {same} ({len(decided['enforcer']):,} decisions)")


def core_flood(n: int) -> float:
    """The quota core alone on a flood (one principal, R = 100 per hour): sightings/s, one core."""
    ts, pids, epochs = core.flood(n)
    q = core.PrincipalQuota(100, core.S)
    start = time.perf_counter()
    for i in range(0, n, 50_000):
        q = core.PrincipalQuota.from_bytes(q.to_bytes(), core.S) if i else q  # as the stream does
        q.judge_batch(ts[i : i + 50_000], pids[i : i + 50_000], epochs[i : i + 50_000])
    return n / (time.perf_counter() - start)


def table(rates: dict[str, dict[str, float]], core_rate: float, others: dict[str, list[dict]]) -> None:
    """Issue 23's table: the rows this run measured, with the enforcer as it was before
    the speed-ups and the group state layout as "before", and the targets."""
    flood, real = rates["flood"], rates["realistic"]
    read = min(r["read"] / r["read, Spark text"] for r in rates.values())
    print("\n[issue 23's table]                                   before    now     target")

    def row(name: str, before: str, now: str, target: str) -> None:
        print(f"  {name:<50} {before:>7} {now:>7}   {target}")

    for name, r, target in (("flood", flood, ">= 1.0"), ("realistic", real, ">= 1.2")):
        before = f"{r['enforcer, before'] / r['native']:.2f}"
        row(f"{name}: enforcer / native", before, f"{r['enforcer'] / r['native']:.2f}", target)
        row("  the floor (an operator that does nothing) / native", "", f"{r['floor'] / r['native']:.2f}", "")
    row("pidquota's file source / Spark's text (worse input)", "", f"{read:.2f}", ">= 0.9")
    row("quota core alone, flood, sightings/s, 1 core", "", f"{core_rate / 1e6:.2f}M", ">= 2M")
    if "kafka" in others:
        now = f"{others['kafka'][0]['enforcer'] / 1000:.1f}k" if others["kafka"] else "failed"
        row("Kafka input -> enforcer, events/s, 2 cores", "", now, ">= 150k")
    if "latency" in others:
        lat = others["latency"][0] if others["latency"] else None
        now = f"{lat['p99_ms'] / 1000:.1f} s" if lat else "failed"
        target = f"<= {(lat['trigger_ms'] + 1000) / 1000:.0f} s (trigger + 1 s)" if lat else ""
        row("p99 arrival -> decision, half the maximum rate", "", now, target)
    if "state" in others:
        state_rows(others["state"])


def state_rows(rows: list[dict]) -> None:
    """The 1M-principal rows: the group layout as "before", one entry per principal "now"."""
    by = {r["layout"]: r for r in rows}
    if not by:
        print("  1M principals: failed")
        return

    def share(r):
        return f"{r['per_batch'] / r['first_batch']:.1%}" if r and r["first_batch"] else "-"

    def per_principal(r):
        return f"{(r['jvm_rss'] + r['python_rss']) / r['principals'] / 1024:.1f} KiB" if r else "-"

    def secs(r):
        return f"{r['batch_ms'] / 1000:.1f} s" if r else "-"

    g, p = by.get("groups"), by.get("principals")
    n = next(iter(by.values()))["principals"]
    print(f"  {n:,} principals, a batch touching 1%:")
    print(f"  {'  state written per batch, of the whole state':<50} {share(g):>7} {share(p):>7}   <= 5%")
    print(f"  {'  batch time (median)':<50} {secs(g):>7} {secs(p):>7}")
    print(
        f"  {'  memory per principal (JVM RSS + Python workers)':<50} {per_principal(g):>7} {per_principal(p):>7}   bounded"
    )


def others(names: list[str]) -> dict[str, list[dict]]:
    """Run the other rows' scripts one after another (one Spark at a time): their ROW lines."""
    found = {}
    for name in names:
        cmd = [sys.executable, str(HERE / OTHERS[name][0]), *OTHERS[name][1:]]
        print(f"\n[{name}: python benchmarks/{' '.join(OTHERS[name])}]", flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True)
        lines = done.stdout.splitlines()
        print("\n".join("  " + line for line in lines if not line.startswith("ROW ")), flush=True)
        found[name] = [json.loads(line.split(" ", 2)[2]) for line in lines if line.startswith(f"ROW {name} ")]
        if not found[name]:
            print(f"  failed (exit {done.returncode}): {done.stderr[-1500:]}")
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=10, help="files = micro-batches (maxFilesPerTrigger 1)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every stage this many times, in turn, and report each stage's fastest run (this "
        "2-core machine's floor moved by a fifth between two rounds in one session)",
    )
    ap.add_argument("--all", action="store_true", help="also run the Kafka, latency and 1M-principal rows")
    ap.add_argument(
        "--clients",
        action="store_true",
        help="only what naming the client costs: the flood with and without client_id and broker_id",
    )
    ap.add_argument(
        "--text-source",
        action="store_true",
        help="only the enforcer on Spark's text source against pidquota's file source (issue 43)",
    )
    ap.add_argument(
        "--spark-parse",
        action="store_true",
        help="only the floor and the enforcer with Spark parsing (from_json) before the operator (issue 43)",
    )
    args = ap.parse_args()
    if args.spark_parse:
        spark_parse_lever(args.events, args.files)
        return
    if args.clients:
        clients_cost(args.events, args.files)
        return
    if args.text_source:
        text_lever(args.events, args.files)
        return
    from pidquota.streaming.session import spark_session

    config = load()  # PIDQUOTA_* environment variables apply, e.g. PIDQUOTA_SPARK_SHUFFLE_PARTITIONS=2
    quotas = StaticQuotas({"<default>": 100})
    spark = spark_session(config)
    work = Path(tempfile.mkdtemp(prefix="pidquota-bench-"))
    try:
        print(
            f"{args.events:,} events per input, {args.files} batches, master {config['pidquota.spark.master']}, "
            f"{config['pidquota.spark.shuffle.partitions']} shuffle partitions"
        )
        warm = work / "warmup"
        write_input(warm, 20_000, 2, flood=False)
        for name, stage in stages(config, quotas).items():
            run_stage(spark, config, name, stage, warm, work)
        rates = {}
        for name, flood in (("realistic", False), ("flood", True)):
            folder = work / name
            write_input(folder, args.events, args.files, flood)
            res = best_of(spark, config, quotas, folder, work, args.rounds)
            rates[name] = report(name, args.events, res)
        core_rate = core_flood(args.events)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        spark.stop()
    table(rates, core_rate, others(list(OTHERS)) if args.all else {})


if __name__ == "__main__":
    main()
