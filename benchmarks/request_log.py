"""The broker request log as input: lines per second through the screen alone, and through
the whole enforcer beside the JSON events of the same traffic.

    python benchmarks/request_log.py [--minutes 3] [--noise 10]

The generator's traffic (``pidquota generate``) is written twice: as JSON events, and as
the request log brokers would write for it (``--format kafka-request-log``: an
INIT_PRODUCER_ID line per new PID or epoch, a PRODUCE line per event and ``--noise``
FETCH and METADATA lines per produce request). Then, side by side in one run:

1. **The screen alone**, on one core, no Spark: request-log lines/s through
   ``RequestLogScreen`` (noise thrown away before any JSON parse, inits parsed), and
   JSON events/s through the event screen (``formats/events.py``).
2. **The enforcer**, ``run --once`` in one SparkSession: each input read by pidquota's file
   source and decided, lines/s and events/s. The log's decisions are compared with those
   of the JSON events of its inits alone: the request log sees one init per PID, where the
   produce events judge a throttled PID again at each request, so those differ by design.
3. **Against Spark's text source** reading the same log files into a noop sink (issue 43's
   goal: the enforcer at >= 0.5x of it), and against the enforcer as it was before the
   formats' rebuild, whose query ran the JSON events' strict parse over every screened row
   of any format (``--rounds`` alternating runs of each). Their decisions must be identical.

Also prints the log's bytes per line, and so the volume per 1,000 requests/s.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from pidquota.conf.loader import load
from pidquota.formats.events import Screen
from pidquota.formats.request_log import Options, RequestLogScreen
from pidquota.quota import StaticQuotas
from pidquota.sources.files import read_lines
from pidquota.traffic.generator import TrafficGenerator
from pidquota.traffic.request_log import RequestLog

QUOTAS = {"<default>": 200, "User:crash-loop": 60, "User:per-batch": 60}
LINES = pa.schema([("value", pa.binary()), ("source_file", pa.string())])


def write(work: Path, minutes: int, noise: int) -> tuple[Path, Path, int, int]:
    """The same traffic as JSON events, as a request log, and as the JSON events of the
    log's inits alone (``inits/``); how many events and log lines."""
    for name in ("events", "log", "inits"):
        (work / name).mkdir(parents=True)
    events, log = work / "events" / "events.jsonl", work / "log" / "kafka-request.log"
    gen, rl, seen = TrafficGenerator(seed=7), RequestLog(noise), set()
    n_events = n_lines = 0
    with events.open("w") as fe, log.open("w") as fl, (work / "inits" / "inits.jsonl").open("w") as fi:
        for chunk in gen.chunks(minutes * 60_000):
            lines = list(rl.lines(chunk))
            fe.write("".join(x + "\n" for x in chunk))
            fl.write("".join(x + "\n" for x in lines))
            fi.write("".join(x + "\n" for x in _inits(chunk, seen)))
            n_events, n_lines = n_events + len(chunk), n_lines + len(lines)
    return events, log, n_events, n_lines


def _inits(events: list[str], seen: set) -> list[str]:
    """The events of the inits the request log shows: a PID and epoch's first sighting."""
    out = []
    for text in events:
        e = json.loads(text)
        key = (e["principal"], e["producer_id"], e.get("producer_epoch", -1))
        if e["producer_id"] >= 0 and key not in seen:
            seen.add(key)
            out.append(
                json.dumps({k: e[k] for k in ("timestamp", "principal", "producer_id", "producer_epoch")})
            )
    return out


def screen_alone(path: Path, screen) -> tuple[float, int]:
    """Seconds to screen every line of ``path`` (read into memory first), and rows out."""
    batches = [
        pa.RecordBatch.from_arrays([a, pa.repeat(pa.scalar("file:///x"), len(a))], schema=LINES)
        for a in read_lines(str(path))
    ]
    start, rows = time.perf_counter(), 0
    for b in batches:
        rows += sum(x.num_rows for x in screen.screen(b))
    return time.perf_counter() - start, rows


def enforce(spark, folder: Path, work: Path, config, name: str, judged_as=None) -> tuple[float, list[tuple]]:
    """``run --once`` over ``folder``; ``judged_as``: the settings the query (not the source)
    is built with, an events config giving the query before the formats' rebuild."""
    from pidquota.streaming import query as q
    from pidquota.streaming.outputs.reader import read_output
    from pidquota.streaming.outputs.sink import JsonlSink

    out = work / f"out-{name}"
    shutil.rmtree(out, ignore_errors=True)
    lines = q.file_source(
        spark, str(folder), 0, str(out / "_ck"), screen=256, fmt=q.input_format(config), follow=False
    )
    start = time.perf_counter()
    query = q.start(
        q.enforcer(lines, judged_as or config, StaticQuotas(QUOTAS)),
        JsonlSink(out),
        str(out / "_ck"),
        True,
        0,
    )
    query.awaitTermination()
    took = time.perf_counter() - start
    d = read_output(out, "decisions")
    return took, sorted(
        map(tuple, d[["principal", "producer_id", "timestamp", "verdict"]].itertuples(index=False))
    )


def text_read(spark, folder: Path, work: Path) -> float:
    """Seconds for Spark's own text source to read ``folder`` into a noop sink."""
    ck = work / "ck-text"
    shutil.rmtree(ck, ignore_errors=True)
    start = time.perf_counter()
    query = (
        spark.readStream.text(str(folder)).writeStream.format("noop")
        .option("checkpointLocation", str(ck)).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=int, default=3, help="minutes of generated traffic (200 requests/s)")
    ap.add_argument("--noise", type=int, default=10, help="FETCH/METADATA lines per produce request")
    ap.add_argument("--rounds", type=int, default=2, help="alternating runs of text read, before and now")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pidquota-bench-rl-"))
    try:
        events, log, n_events, n_lines = write(work, args.minutes, args.noise)
        size = log.stat().st_size
        print(f"traffic: {n_events:,} events; request log {n_lines:,} lines, {size / n_lines:.0f} bytes/line")
        print(
            f"  volume at 1,000 requests/s: {size / n_lines * 1000 / 1e6:.2f} MB/s, {size / n_lines * 1000 * 3600 / 1e9:.1f} GB/hour"
        )
        secs, _ = screen_alone(log, RequestLogScreen(LINES, 256, Options()))
        print(f"screen alone, one core: request log {n_lines / secs / 1e6:.2f} M lines/s ({secs:.2f} s)")
        secs_e, _ = screen_alone(events, Screen(LINES, 256))
        print(
            f"screen alone, one core: JSON events {n_events / secs_e / 1e6:.2f} M events/s ({secs_e:.2f} s)"
        )

        from pidquota.streaming.session import spark_session

        base = {"pidquota.spark.shuffle.partitions": "2"}
        spark = spark_session(load(overrides=base, environ={}))
        enforce(spark, events.parent, work, load(overrides=base, environ={}), "warm")  # a warm JVM for both
        t_ev, d_ev = enforce(spark, events.parent, work, load(overrides=base, environ={}), "events")
        rl_config = load(overrides={**base, "pidquota.input.format": "kafka-request-log"}, environ={})
        t_rl, d_rl = enforce(spark, log.parent, work, rl_config, "log")
        print(f"enforcer, JSON events:  {n_events / t_ev / 1e3:8.1f} k events/s ({t_ev:.1f} s)")
        print(f"enforcer, request log:  {n_lines / t_rl / 1e3:8.1f} k lines/s  ({t_rl:.1f} s)")
        print(f"  ratio (log lines/s over events/s): {n_lines / t_rl / (n_events / t_ev):.2f}")
        _, d_in = enforce(spark, work / "inits", work, load(overrides=base, environ={}), "inits")
        same = "identical" if d_in == d_rl else f"DIFFER ({len(d_in)} vs {len(d_rl)})"
        throttled = sum(v == "THROTTLE" for *_, v in d_rl)
        print(
            f"decisions vs the JSON events of the same inits: {same}, {len(d_rl):,} PIDs, {throttled} throttled"
        )
        print(f"  (the produce events judge a throttled PID again at each request: {len(d_ev):,} decisions)")
        events_config = load(overrides=base, environ={})
        text, before, now = [], [], []
        for r in range(args.rounds):
            text.append(text_read(spark, log.parent, work))
            t, d_before = enforce(spark, log.parent, work, rl_config, f"before-{r}", judged_as=events_config)
            before.append(t)
            t, d_now = enforce(spark, log.parent, work, rl_config, f"now-{r}")
            now.append(t)
            assert d_before == d_now == d_rl, "the query before the rebuild decided otherwise"
        shown = lambda ts: ", ".join(f"{n_lines / t / 1e3:.1f}k" for t in ts)  # noqa: E731
        print(f"Spark's text source, noop sink: {shown(text)} lines/s")
        print(f"enforcer, request log, before:  {shown(before)} lines/s (decisions identical)")
        print(f"enforcer, request log, now:     {shown(now)} lines/s")
        print(f"  enforcer / Spark's text read: {min(text) / min(now):.2f} (best of each; goal >= 0.5)")
        print(f"  now / before: {min(before) / min(now):.2f} (best of each)")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
