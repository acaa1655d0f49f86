"""``pidquota``: the command line.

``pidquota run`` with no arguments runs the embedded demo (no Kafka, no
Redis). ``pidquota run --input PATH --output DIR --once`` enforces quotas on
JSON-lines files and exits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pidquota.cli import analysis as analysis_commands
from pidquota.cli import configs as store_commands
from pidquota.cli import generate as traffic_commands
from pidquota.cli import preflight
from pidquota.conf.durations import EXAMPLES, parse_duration_ms
from pidquota.conf.errors import PidquotaError
from pidquota.conf.loader import load, parse_overrides
from pidquota.conf.paths import local_path
from pidquota.quota import QuotaSettings, StaticQuotas
from pidquota.store.kafka import KafkaUrl, security_options

DEMO_SPEED = 60.0
DEMO_PROMETHEUS_PORT = 9464
TABLE_ROWS = 20  # users in the live table of a real input (throttled first)


DESCRIPTION = """Cluster-wide producer-ID quotas for Apache Kafka (KIP-936's producer_ids_rate),
enforced by a Spark Structured Streaming job: only previously unseen PIDs count
against a user's quota, so known producers keep flowing."""
EXAMPLES_TEXT = """examples:
  pidquota run                                        the demo: generated traffic, a live table
  pidquota run --input events.jsonl --output out --once
  pidquota run --input kafka://broker:9092/produce-events --prometheus-port 9464
  pidquota configs --redis redis://localhost:6379/0 --alter --entity-type users \\
      --entity-name alice --add-config producer_ids_rate=50
  pidquota recommend --input events/ --what-if conf/quotas.json
  pidquota report out

'pidquota COMMAND --help' tells more; the README has the whole story."""


def version() -> str:
    """The installed package's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("pidquota")
    except PackageNotFoundError:  # run from a source tree (or spark-submit's zip) without installing
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="pidquota",
        description=DESCRIPTION,
        epilog=EXAMPLES_TEXT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action="version", version=f"pidquota {version()}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run_parser(sub)
    _add_package_parser(sub)
    analysis_commands.add_parsers(sub)
    traffic_commands.add_parsers(sub)
    store_commands.add_parsers(sub)
    return ap


def _add_run_parser(sub) -> None:
    run = sub.add_parser(
        "run",
        help="run the enforcer (the demo when no --input is given)",
        description="Run the producer-ID quota enforcer. Without --input: the embedded demo.",
    )
    run.add_argument(
        "--input",
        metavar="PATH|URL",
        help="JSON-lines file or folder, or kafka://HOST[:PORT]/TOPIC (port 9092 unless given; default: demo)",
    )
    run.add_argument("--output", metavar="DIR", default="pidquota-out", help="output folder (%(default)s)")
    run.add_argument(
        "--once", action="store_true", help="process everything available, then exit (needs --input)"
    )
    run.add_argument(
        "--quotas", metavar="FILE", help="JSON quota file (default: conf/quotas.json; not with --quota-store)"
    )
    run.add_argument("--config", metavar="FILE", help=".properties file (default: conf/pidquota.properties)")
    run.add_argument(
        "--set", metavar="KEY=VALUE", action="append", default=[], help="override a setting (repeatable)"
    )
    run.add_argument(
        "--checkpoint",
        metavar="DIR|URI",
        help="checkpoint folder (default: OUTPUT/_checkpoint); on a cluster, one every node shares",
    )
    run.add_argument(
        "--master",
        metavar="URL",
        help="Spark master, e.g. spark://HOST:7077 (pidquota ships its code to the executors); "
        "default: spark-submit's, else pidquota.spark.master",
    )
    run.add_argument(
        "--duration",
        metavar="DURATION",
        help="stop after this long (wall time, from the first micro-batch's end, so start-up does "
        f"not count; with --once, whichever ends first): {EXAMPLES}",
    )
    run.add_argument(
        "--speed", type=float, help=f"demo only: event time per wall time (default {DEMO_SPEED:g})"
    )
    run.add_argument(
        "--prometheus-port",
        metavar="PORT",
        type=int,
        help=f"serve Prometheus metrics at http://HOST:PORT/metrics (the demo: {DEMO_PROMETHEUS_PORT})",
    )
    run.add_argument(
        "--fresh",
        action="store_true",
        help="delete OUTPUT (and a --checkpoint outside it) first and start from scratch; "
        "refused unless it looks like pidquota output",
    )
    _add_rollout_flags(run)
    _add_kafka_flags(run)


def _add_rollout_flags(run) -> None:
    """``pidquota run``'s shadow mode and cold start (README: "Rolling out quotas")."""
    run.add_argument(
        "--shadow",
        action="store_true",
        help="compute and write everything, marked mode=shadow, but publish no throttles where "
        "brokers look (Redis gets a separate shadow: key space)",
    )
    replay = run.add_mutually_exclusive_group()
    replay.add_argument(
        "--replay-until",
        metavar="TS",
        help="events before TS (epoch ms, or now) only rebuild state: marked replay=true, never "
        "published; a new Kafka checkpoint starts W + W/layer.count before TS",
    )
    replay.add_argument(
        "--rebuild",
        action="store_true",
        help="--replay-until now: the way to start on a topic that already holds traffic",
    )


def _add_kafka_flags(run) -> None:
    """``pidquota run``'s Kafka and Redis flags."""
    run.add_argument(
        "--starting-offsets",
        metavar="WHERE",
        help="Kafka input, new query: earliest (default), latest, a timestamp in ms, or a JSON offset map",
    )
    for kind in ("decisions", "metrics", "dead-letters"):
        run.add_argument(
            f"--{kind}-topic",
            metavar="TOPIC|URL",
            help=f"also send {kind.replace('-', ' ')} to this Kafka topic (a name on the input's cluster, "
            "or kafka://HOST[:PORT]/TOPIC)",
        )
    run.add_argument(
        "--quota-store",
        metavar="URL",
        help="read quotas live from Redis (redis://HOST:PORT/DB) instead of a file",
    )


def _add_package_parser(sub) -> None:
    package = sub.add_parser(
        "package",
        help="write pidquota.zip, pidquota_main.py and log4j2.properties for spark-submit --py-files",
        description="Write pidquota's code as a zip, an entry script and its quiet Spark logging configuration, for spark-submit on a cluster.",
    )
    package.add_argument("--output", metavar="DIR", default="dist", help="folder to write to (%(default)s)")


def run_package(args: argparse.Namespace) -> int:
    """``pidquota package``: the zip and the entry script for ``spark-submit --py-files``."""
    from pidquota.streaming import ship

    try:
        zipped, main_script, logs = ship.package(Path(args.output))
    except OSError as exc:
        raise PidquotaError(f"cannot write to {args.output}: {exc.strerror or exc}") from None
    print(
        f"pidquota: wrote {zipped} ({zipped.stat().st_size // 1024} KiB), {main_script} and {logs}; "
        "on a cluster:\n"
        f"  spark-submit --master spark://HOST:7077 --py-files {zipped} "
        f'--driver-java-options "-Dlog4j2.configurationFile={logs.resolve()}" \\\n'
        f"    {main_script} run --input kafka://BROKER:9092/TOPIC --checkpoint SHARED/FOLDER --output FOLDER"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """``pidquota run``; Ctrl-C and SIGTERM stop it gracefully from the first moment."""
    signals = _Signals().install()
    try:
        with contextlib.ExitStack() as cleanup:
            return _run(args, signals, cleanup)
    finally:
        signals.restore()


@dataclass
class _Plan:
    """What ``pidquota run`` settled before Spark starts."""

    config: object
    quotas: object
    publish: object
    out: Path
    checkpoint: str
    kafka_input: str | None
    kafka_out: dict | None
    reads: preflight.Source
    resumed: bool
    replay_ms: int | None
    exporter: object

    @property
    def demo(self) -> bool:
        return self.reads.kind == "demo"


def _plan(args: argparse.Namespace, cleanup: contextlib.ExitStack) -> _Plan:
    """Every start-up check, in the order that fails fastest; nothing here starts Spark."""
    kafka_input = args.input if args.input and args.input.startswith("kafka://") else None
    preflight.check_flags(args, kafka_input is not None)
    if args.duration is not None:
        parse_duration_ms(args.duration)
    config = load(args.config, _run_overrides(args))
    preflight.check_quotas_flag(args, config)
    quotas, publish = quota_source(config)
    out = Path(args.output)
    checkpoint = config["pidquota.checkpoint.location"] or str(out / "_checkpoint")
    if kafka_input:
        KafkaUrl.parse(kafka_input)  # a malformed URL fails now, before Spark starts
    kafka_out = kafka_outputs(config, kafka_input)
    reads, resumed = _start_up_checks(args, config, out, checkpoint)
    config = _checkpoint_state_store(config, checkpoint)
    config, replay_ms = _replay(config, checkpoint, kafka_input is not None)
    exporter = _exporter(config, args.input is None)
    if exporter is not None:
        cleanup.callback(exporter.close)
    return _Plan(
        config, quotas, publish, out, checkpoint, kafka_input, kafka_out, reads, resumed, replay_ms, exporter
    )


def _run(args: argparse.Namespace, signals: _Signals, cleanup: contextlib.ExitStack) -> int:
    plan = _plan(args, cleanup)
    config, checkpoint = plan.config, plan.checkpoint
    speed = DEMO_SPEED if args.speed is None else args.speed
    from pidquota.streaming import query as q
    from pidquota.streaming.session import spark_session

    spark = spark_session(config, args.master)
    signals.install()  # again: PySpark's SparkContext put its own SIGINT handler in place
    if signals.exit_code is not None:  # stopped while Spark was starting
        return signals.exit_code
    # once Java is there: a failed start leaves no trace
    buckets, store = config["pidquota.state.buckets"], config["pidquota.state.store"]
    preflight.write_marker(checkpoint, plan.reads, buckets, store, plan.replay_ms)
    lines = _lines(spark, args, config, plan.kafka_input, checkpoint, speed, str(signals.flag))
    print(_banner(args, config, checkpoint, speed, plan.replay_ms))
    table = _table(args, config)
    summed = args.once or args.duration is not None or plan.demo
    sink, summary = _sink(plan, table and table.update, summed)
    output = q.enforcer(lines, config, plan.quotas, replay_until=plan.replay_ms)
    query = q.start(output, sink, checkpoint, args.once, config["pidquota.trigger.interval.ms"])
    duration_s = None if args.duration is None else parse_duration_ms(args.duration) / 1000
    error = _wait(query, duration_s, signals, _progress_observers(config, args.once, plan.exporter))
    if error is not None:
        raise PidquotaError(f"the streaming query failed: {_first_line(error)}")
    if table is not None:
        table.flush()
    _say_end(args, plan, sink.totals, summary)
    return signals.exit_code or 0


def _sink(plan: _Plan, on_batch, summed: bool):
    """The sink, with every observer of its batches: the table, the exporter, and if ``summed``
    the end's summary (it keeps each user's new PIDs: only for --once, --duration and the demo,
    not for a production run without an end)."""
    from pidquota.observe.report_data import RunSummary
    from pidquota.streaming.outputs.sink import JsonlSink

    summary = RunSummary() if summed else None
    observers = [f for f in (on_batch, plan.exporter and plan.exporter.observe_batch) if f]
    if summary is not None:
        observers.append(lambda batch_id, frames: summary.add(frames))
    sink = JsonlSink(
        plan.out,
        on_batch=_each(observers),
        kafka=plan.kafka_out,
        publish=plan.publish,
        replay_until=plan.replay_ms,
        mode=plan.config["pidquota.mode"],
        roll_ms=plan.config["pidquota.output.roll.ms"],
        retention_ms=plan.config["pidquota.output.retention.ms"],
    )
    return sink, summary


def _say_end(args: argparse.Namespace, plan: _Plan, totals, summary) -> None:
    """The run's last lines: who was throttled, and what was written where."""
    if totals.batches == 0 and not plan.demo:
        print(
            f"pidquota: nothing new since the checkpoint ({plan.checkpoint})"
            if plan.resumed
            else f"pidquota: read nothing from {args.input}",
            file=sys.stderr,
        )
    shadow = " (SHADOW: computed, not published)" if plan.config["pidquota.mode"] == "shadow" else ""
    if totals.batches and summary is not None:
        print(f"pidquota: this run's users{shadow}:\n" + summary.render())
    elif totals.batches:
        print(f"pidquota: who was throttled{shadow}: pidquota report {args.output}")
    print(
        f"pidquota: {totals.batches} batch{'es' if totals.batches != 1 else ''}; wrote "
        f"{totals.rows['decisions']} decisions, {totals.rows['metrics']} metric rows, "
        f"{totals.rows['dead-letters']} dead letters under {plan.out}/"
    )


def _run_overrides(args: argparse.Namespace) -> dict[str, str]:
    """``--set`` plus the flags that are shorthands for settings."""
    overrides = parse_overrides(args.set)
    flags = {
        "quotas": "pidquota.quotas.file",
        "checkpoint": "pidquota.checkpoint.location",
        "starting_offsets": "pidquota.kafka.starting.offsets",
        "decisions_topic": "pidquota.kafka.decisions.topic",
        "metrics_topic": "pidquota.kafka.metrics.topic",
        "dead_letters_topic": "pidquota.kafka.dead.letters.topic",
        "quota_store": "pidquota.redis.url",
        "prometheus_port": "pidquota.prometheus.port",
        "replay_until": "pidquota.replay.until",
    }
    if args.shadow:
        overrides["pidquota.mode"] = "shadow"
    if args.rebuild:
        overrides["pidquota.replay.until"] = "now"
    for flag, key in flags.items():
        value = getattr(args, flag)
        if value is not None and value != "":  # --prometheus-port 0 is given: off
            overrides[key] = str(value)
    return overrides


def _lines(
    spark, args: argparse.Namespace, config, kafka_input: str | None, checkpoint: str, speed: float, stop: str
):
    """The input as a stream of lines."""
    from pidquota.streaming import query as q
    from pidquota.streaming.sources.kafka.source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)  # the Kafka source, and the sink's Kafka outputs
    screen = config["pidquota.principal.max.length"]  # the sources screen their own lines
    if kafka_input:
        return q.kafka_source(spark, KafkaUrl.parse(kafka_input), config, stop, screen)
    if args.input is not None:
        max_files = config["pidquota.max.events.per.trigger"]
        return q.file_source(spark, args.input, max_files, checkpoint, stop, screen)
    from pidquota.streaming import stopping
    from pidquota.streaming.sources.demo import DemoDataSource

    spark.dataSource.register(DemoDataSource)
    demo = spark.readStream.format("pidquota-demo").option("speed", speed).option(stopping.OPTION, stop)
    return demo.load()


def _table(args: argparse.Namespace, config):
    """The live per-user table of a long-running query (None with --once): every user in the
    demo, the first TABLE_ROWS (throttled first) of a real input."""
    if args.once:
        return None
    from pidquota.observe.table import UserTable

    window_ms = QuotaSettings.from_config(config).window_ms
    shadow = config["pidquota.mode"] == "shadow"
    return UserTable(window_ms, shadow=shadow, max_rows=None if args.input is None else TABLE_ROWS)


def _replay(config, checkpoint: str, kafka_input: bool):
    """The config and the replay time in force (``streaming/replay.py``). A Kafka input on a new
    checkpoint starts where the replay must begin, unless --starting-offsets says otherwise."""
    from pidquota.streaming import replay

    if config[replay.KEY].strip() == "now" and local_path(checkpoint) is None:
        raise PidquotaError(
            f"--rebuild (--replay-until now) records its time in the checkpoint, and {checkpoint} is not "
            "a local folder pidquota can write to; give the time itself: --replay-until EPOCH_MS"
        )
    progress = local_path(checkpoint) is not None and preflight.has_progress(local_path(checkpoint))
    recorded = preflight.recorded_replay(checkpoint)
    until, note = replay.replay_until(config[replay.KEY], recorded, progress, int(time.time() * 1000))
    if note:
        print(f"pidquota: {note}", file=sys.stderr)
    offsets = "pidquota.kafka.starting.offsets"
    if until is not None and kafka_input and not progress and not config.given(offsets):
        start = replay.replay_start_ms(until, QuotaSettings.from_config(config))
        config = config.replace(offsets, str(start), "--replay-until")
    return config, until


def _banner(args: argparse.Namespace, config, checkpoint: str, speed: float, replay_ms=None) -> str:
    """What the run does, where it writes, and whether it resumes a checkpoint."""
    quotas = "Redis" if config["pidquota.redis.url"] else config.quotas_path()
    done = preflight.last_batch(checkpoint)
    start = "new checkpoint" if done is None else f"resuming after batch {done}"
    if local_path(checkpoint) is None:
        start = f"checkpoint {checkpoint}"
    what = f"demo at {speed:g}x event time" if args.input is None else f"reading {args.input}"
    until = "until all of it is read" if args.once else "Ctrl-C to stop"
    mode = "SHADOW (nothing published as throttled), " if config["pidquota.mode"] == "shadow" else ""
    if replay_ms is not None:
        from pidquota.store.decisions import event_time

        start += f"; events before {event_time(replay_ms)} only rebuild state"
    return f"pidquota: {mode}{what}, quotas from {quotas}, output in {args.output}/ ({start}); {until}"


def _exporter(config, demo: bool):
    """The Prometheus endpoint, serving before Spark starts (a port in use fails now), or None.
    The demo serves at DEMO_PROMETHEUS_PORT unless told otherwise, and goes on without
    metrics if that port is taken."""
    port = config["pidquota.prometheus.port"]
    if demo and not config.given("pidquota.prometheus.port"):
        port = DEMO_PROMETHEUS_PORT
    if not port:
        return None
    from pidquota.observe.exporter import Exporter

    window_ms = QuotaSettings.from_config(config).window_ms
    shadow = config["pidquota.mode"] == "shadow"
    exporter = Exporter(window_ms, config["pidquota.prometheus.max.users"], shadow=shadow)
    host = config["pidquota.prometheus.host"]
    try:
        exporter.serve(host, port)
    except PidquotaError as exc:
        if config.given("pidquota.prometheus.port") or not demo:
            raise
        print(f"pidquota: no Prometheus metrics: {exc}", file=sys.stderr)
        return None
    shown = "localhost" if host in ("0.0.0.0", "::", "") else host
    print(f"pidquota: Prometheus metrics at http://{shown}:{port}/metrics")
    return exporter


def _each(callbacks: list):
    """One ``on_batch`` that calls each of ``callbacks`` in turn (None if there are none)."""
    if not callbacks:
        return None

    def call(batch_id: int, frames: dict) -> None:
        for callback in callbacks:
            callback(batch_id, frames)

    return call


def _start_up_checks(
    args: argparse.Namespace, config, out: Path, checkpoint: str
) -> tuple[preflight.Source, bool]:
    """The input is there (a Kafka input's brokers answer), ``--fresh`` deleted what it should,
    and the checkpoint is this source's. Returns the source and whether the run resumes a
    checkpoint. A file input's hidden names and files changed since they were read are named
    on stderr."""
    reads = preflight.Source.of(args.input)
    preflight.check_input(reads)
    if reads.kind == "kafka":
        preflight.check_kafka(KafkaUrl.parse(args.input), config)
    preflight.check_local_checkpoint(checkpoint, reads.kind == "file")
    if args.fresh:
        preflight.fresh(out, checkpoint)
    preflight.check_checkpoint(checkpoint, reads, out)
    preflight.check_output_batches(checkpoint, out)
    if reads.kind != "file":
        ckpt = local_path(checkpoint)
        return reads, ckpt is not None and (ckpt / "offsets").is_dir()
    from pidquota.streaming.sources.listing import start_up_notes

    notes, resumed = start_up_notes(args.input, checkpoint)
    for note in notes:
        print(f"pidquota: {note}", file=sys.stderr)
    return reads, resumed


def _checkpoint_state_store(config, checkpoint: str):
    """The config with the checkpoint's state store, if it has one and the setting was left
    at its default (one line says so); a store given otherwise is refused."""
    key = "pidquota.state.store"
    store = preflight.check_state_layout(
        checkpoint, config["pidquota.state.buckets"], config[key], config.given(key)
    )
    if store == config[key]:
        return config
    print(f"pidquota: the checkpoint keeps its state in {key}={store}; using it", file=sys.stderr)
    return config.replace(key, store, "checkpoint")


def quota_source(config):
    """The quota file, or live quotas from Redis (plus the fenced decision publisher)."""
    url = config["pidquota.redis.url"]
    if not url:
        return StaticQuotas.from_file(config.quotas_path()), None
    from pidquota.quota import QuotaSettings
    from pidquota.store.client import auth_kwargs, connect_config
    from pidquota.store.decisions import DecisionStore
    from pidquota.store.quotas import RedisQuotas, RedisQuotaStore
    from pidquota.store.sink import RedisPublisher

    client = connect_config(config)  # at start-up: a Redis that is not there is an error now
    prefix = config["pidquota.redis.prefix"]
    store = RedisQuotaStore(client, prefix)
    quotas = RedisQuotas.load(store, url, auth_kwargs(config), config["pidquota.quota.refresh.ms"])
    if not config["pidquota.redis.publish.decisions"]:
        return quotas, None
    window_ms = QuotaSettings.from_config(config).window_ms
    shadow = config["pidquota.mode"] == "shadow"
    return quotas, RedisPublisher(DecisionStore(client, prefix, shadow), quotas, window_ms)


def kafka_outputs(config, input_url: str | None) -> dict | None:
    """Options for the Kafka writer from the ``pidquota.kafka.*.topic`` settings, or None."""
    topics = {
        "decisionsTopic": config["pidquota.kafka.decisions.topic"],
        "metricsTopic": config["pidquota.kafka.metrics.topic"],
        "deadLettersTopic": config["pidquota.kafka.dead.letters.topic"],
    }
    topics = {k: v for k, v in topics.items() if v}
    if not topics:
        return None
    bootstrap = None
    for key, value in topics.items():
        if value.startswith("kafka://"):
            url = KafkaUrl.parse(value)
            if bootstrap not in (None, url.bootstrap):
                raise PidquotaError("all output topics must be on one Kafka cluster")
            bootstrap, topics[key] = url.bootstrap, url.topic
    if bootstrap is None:
        if input_url is None:
            raise PidquotaError(
                "an output topic given by name needs a Kafka input; with a file input use kafka://HOST[:PORT]/TOPIC"
            )
        bootstrap = KafkaUrl.parse(input_url).bootstrap
    return {"kafka.bootstrap.servers": bootstrap, **security_options(config), **topics}


# `pidquota run` stopped by a signal exits as a shell reports it: 128 + the signal.
EXIT_SIGINT, EXIT_SIGTERM = 130, 143
_STOPS = {signal.SIGINT: (EXIT_SIGINT, "Ctrl-C"), signal.SIGTERM: (EXIT_SIGTERM, "SIGTERM")}


class _Signals:
    """Ctrl-C (SIGINT) or SIGTERM: finish the batch in flight, then stop.

    Installed before Spark starts and again once it has (PySpark's own SIGINT
    handler calls into the JVM from inside the signal handler while the main
    thread is in a call to it, and prints about 50 lines of py4j tracebacks).
    This one only records the signal and touches the sources' stop flag
    (``streaming/stopping.py``); the wait loop sees it within a second. A
    second signal exits at once: the checkpoint is safe at any point.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.flag = Path(tempfile.mkdtemp(prefix="pidquota-")) / "stop"
        self._previous: dict = {}

    def install(self) -> _Signals:
        for sig in _STOPS:
            previous = signal.signal(sig, self._handle)
            self._previous.setdefault(sig, previous)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(self.flag.parent, ignore_errors=True)

    def request_stop(self) -> None:
        self.flag.touch()

    def _handle(self, signum, frame) -> None:
        code, name = _STOPS[signum]
        if self.signum is not None:
            print(
                "pidquota: stopped now; the next run resumes from the checkpoint", file=sys.stderr, flush=True
            )
            os._exit(code)
        self.signum = signum
        self.request_stop()
        print(
            f"pidquota: stopping after the batch in flight ({name}; again to stop now)",
            file=sys.stderr,
            flush=True,
        )

    @property
    def exit_code(self) -> int | None:
        return None if self.signum is None else _STOPS[self.signum][0]


def _progress_observers(config, once: bool, exporter) -> list:
    """What looks at Spark's progress reports while the query runs."""
    from pidquota.observe.pace import Pace

    observers = [] if once else [Pace(config["pidquota.trigger.interval.ms"]).observe]
    return observers + ([exporter.observe_progress] if exporter is not None else [])


def _wait(
    query, duration: float | None, signals: _Signals, on_progress: list | None = None
) -> BaseException | None:
    """Wait for the end, ``duration`` or a signal, showing ``on_progress`` Spark's progress
    reports; stop the query; return its error.

    ``duration`` counts from Spark's first progress report (the first micro-batch's end, or
    its first trigger with nothing to read): on a cluster, start-up (executors, their Python
    workers, the state store) can take longer than a short duration, and a clock started
    with the query would stop it before any event was decided."""
    from pyspark.errors import StreamingQueryException

    deadline = None
    try:
        while query.isActive and signals.signum is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            query.awaitTermination(max(0.01, min(left, 1.0)) if left is not None else 1.0)
            progress = query.lastProgress
            if duration is not None and deadline is None and progress is not None:
                deadline = time.monotonic() + duration
            for observe in on_progress or ():
                observe(progress)
    except StreamingQueryException as exc:
        return exc
    finally:
        _stop_between_batches(query, signals)
    return query.exception()


def _stop_between_batches(query, signals: _Signals, patience_s: float = 60.0) -> None:
    """Ask the sources for no more data, let the batch in flight finish (at most ``patience_s``),
    then stop the query while no batch runs."""
    signals.request_stop()
    deadline = time.monotonic() + patience_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    if query.isActive:
        query.stop()


_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Invalid)): (.+)$")


def _first_line(error: BaseException) -> str:
    """The line of a (Java-wrapped) Python traceback that names the cause."""
    text = str(getattr(error, "desc", None) or error)
    found = []
    for line in text.splitlines():
        m = _EXCEPTION_LINE.match(line.strip())
        if m and not m.group(3).rstrip().endswith("(most recent call last):"):
            found.append(line.strip())
    ours = [x for x in found if x.startswith(("pidquota.conf.errors.", "PidquotaError", "CorruptStateError"))]
    if ours or found:
        return (ours or found)[0]
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {
        "run": run,
        "generate": traffic_commands.run_generate,
        "blocks": traffic_commands.run_blocks,
        "configs": store_commands.run_configs,
        "status": store_commands.run_status,
        "package": run_package,
        "recommend": analysis_commands.run_recommend,
        "report": analysis_commands.run_report,
    }
    try:
        return handler[args.command](args)
    except PidquotaError as exc:
        print(f"pidquota: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
