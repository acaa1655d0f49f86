"""``pidquota run``: the enforcer. With no ``--input``, the embedded demo (no Kafka, no Redis);
``pidquota run --input PATH --output DIR --once`` enforces quotas on JSON-lines files and exits."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import sys

import pidquota.formats as formats
from pidquota.cli import checkpoints, run_plan
from pidquota.cli.common import add_config_flags, add_input_flags
from pidquota.cli.signals import Signals, wait
from pidquota.conf import formats as registry
from pidquota.conf.durations import EXAMPLES, parse_duration_ms
from pidquota.conf.errors import InputError, PidquotaError
from pidquota.conf.paths import local_path
from pidquota.conf.settings import memory_kib
from pidquota.quota import QuotaSettings
from pidquota.store.kafka import KafkaUrl
from pidquota.streaming.columns import ANONYMOUS

DEMO_SPEED = 60.0


TABLE_ROWS = 20  # users in the live table of a real input (throttled first)


def add_parser(sub) -> argparse.ArgumentParser:
    run = sub.add_parser(
        "run",
        help="run the enforcer (the demo when no --input is given)",
        description="Run the producer-ID quota enforcer. Without --input: the embedded demo.",
    )
    run.add_argument(
        "--input",
        metavar="PATH|URL",
        help="a file or folder of lines, or kafka://HOST[:PORT]/TOPIC (port 9092 unless given; default: demo)",
    )
    add_input_flags(run, follow=True)
    run.add_argument("--output", metavar="DIR", default="pidquota-out", help="output folder (%(default)s)")
    run.add_argument(
        "--once", action="store_true", help="process everything available, then exit (needs --input)"
    )
    run.add_argument(
        "--quotas", metavar="FILE", help="JSON quota file (default: conf/quotas.json; not with --quota-store)"
    )
    add_config_flags(run)
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
    _add_run_control_flags(run)
    _add_rollout_flags(run)
    _add_kafka_flags(run)
    return run


def _add_run_control_flags(run) -> None:
    """How long ``pidquota run`` runs, how fast the demo goes, metrics, and a fresh start."""
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
        help=f"serve Prometheus metrics at http://HOST:PORT/metrics (the demo: {run_plan.DEMO_PROMETHEUS_PORT})",
    )
    run.add_argument(
        "--fresh",
        action="store_true",
        help="delete OUTPUT (and a --checkpoint outside it) first and start from scratch; "
        "refused unless it looks like pidquota output",
    )


def _add_rollout_flags(run) -> None:
    """``pidquota run``'s shadow mode and cold start (docs/rollout.md)."""
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


def run(args: argparse.Namespace) -> int:
    """``pidquota run``; Ctrl-C and SIGTERM stop it gracefully from the first moment."""
    signals = Signals().install()
    try:
        with contextlib.ExitStack() as cleanup:
            try:
                code = _run(args, signals, cleanup)
            except PidquotaError as exc:
                left = signals.left_behind()  # what the actuator could not lift: in the last line
                if left and exc.args:
                    exc.args = (f"{exc.args[0]}. {left}", *exc.args[1:])
                raise
            left = signals.left_behind()
            if left:
                print(f"pidquota: {left}", file=sys.stderr)
            return code
    finally:
        signals.restore()


def _compile_once(compiled_after: int) -> None:
    """A fresh installation compiles the judge here, once, said in a line, so that Spark's
    Python workers load it (~0.3 s each) instead of each compiling it (~16 CPU-s each). The
    driver's JSON writer is loaded once it has written ``compiled_after`` rows
    (``pidquota.compiled.after``)."""
    from pidquota.quota import kernel
    from pidquota.streaming.outputs import jsonl_kernel

    jsonl_kernel.LOAD_AFTER = compiled_after

    if not kernel.compiled_here():
        print("pidquota: compiling the judge for this installation, once (about 20 s)...", flush=True)
        kernel.available()
    if not jsonl_kernel.compiled_here():  # the driver's JSON writer: ~1.3 CPU-s once per installation
        jsonl_kernel.compiled()  # (then loaded by a run that writes enough rows: jsonl_kernel.wanted)


def _run(args: argparse.Namespace, signals: Signals, cleanup: contextlib.ExitStack) -> int:
    plan = run_plan.plan(args, cleanup)
    config, checkpoint = plan.config, plan.checkpoint
    speed = DEMO_SPEED if args.speed is None else args.speed
    from pidquota.streaming import query as q
    from pidquota.streaming import session
    from pidquota.streaming.session import spark_session

    _compile_once(config["pidquota.compiled.after"])
    spark = spark_session(config, args.master)
    signals.install()  # again: PySpark's SparkContext put its own SIGINT handler in place
    if signals.exit_code is not None:  # stopped while Spark was starting
        return signals.exit_code
    # once Java is there: a failed start leaves no trace
    buckets, store = config["pidquota.state.buckets"], config["pidquota.state.store"]
    reading = run_plan.reading(config, plan.reads)
    layout = config["pidquota.state.layout"]
    checkpoints.write_marker(checkpoint, plan.reads, buckets, store, plan.replay_ms, reading, layout)
    lines = _lines(spark, args, config, plan.kafka_input, checkpoint, speed, str(signals.flag))
    print(run_plan.banner(args, config, checkpoint, speed, plan.replay_ms))
    acting = run_plan.actuator_shown(config, plan.act)
    if acting:
        print(acting.replace("OUTPUT/", run_plan.folder_shown(args.output)))
    table = _table(args, config)
    progress = None if table is not None else _progress()
    summed = args.once or args.duration is not None or plan.demo
    sink, summary = _sink(plan, table.update if table is not None else progress.update, summed)
    if table is not None and plan.act is not None:
        table.held(plan.act.acted)  # a restart keeps what the last run held
    output = q.enforcer(lines, config, plan.quotas, replay_until=plan.replay_ms)
    query = q.start(output, sink, checkpoint, args.once, config["pidquota.trigger.interval.ms"])
    duration_s = None if args.duration is None else parse_duration_ms(args.duration) / 1000
    heap = spark.sparkContext.getConf().get("spark.driver.memory", "1g")  # while the JVM answers
    if plan.act is not None:
        signals.left_behind = plan.act.left_behind
    signals.on_stop = session.stopping  # the JVM's own end is not printed
    signalled = False  # a stop signal came before the query's end (not during the lift after it)
    try:
        error = wait(query, duration_s, signals, _progress_observers(config, args.once, plan.exporter))
        signalled = signals.signum is not None
    except Exception as exc:
        gone = _jvm_gone(exc, heap)
        if gone is None:
            raise
        if _stopped_with_us(signals):
            print(_STOPPED_WITH_US, file=sys.stderr)
            return signals.exit_code
        raise gone from None
    finally:
        sink.close()
        if plan.act is not None:  # the run's end lifts its actions; a kill leaves them to the next start
            sink.record_actions(plan.act.stop())
    if error is not None and signalled and _stopped_with_us(signals):  # it ended as its JVM stopped
        print(_STOPPED_WITH_US, file=sys.stderr)
        return signals.exit_code
    if error is not None:
        raise _query_failed(error, plan, heap)
    if table is not None:
        table.flush()
    else:
        progress.close()
    _say_end(args, plan, sink.totals, summary)
    return signals.exit_code or 0


STOPPING_JVM_S = 20.0  # how long a JVM that got the stop signal too may take to end
_STOPPED_WITH_US = (
    "pidquota: Spark's JVM stopped on the same signal (it was sent to the whole process group, as "
    "GNU timeout and some service managers do); the run stops here, and the next resumes from "
    "its checkpoint"
)


def _stopped_with_us(signals: Signals) -> bool:
    """Spark's JVM ended on the stop signal pidquota got too (the process group's), not by a
    fault of its own: code 128 + the signal, or killed by it."""
    if signals.signum is None:
        return False
    # Its shutdown hooks (stopping the SparkContext, closing the state stores) may outlast the
    # query's failure by seconds: a run stopped by GNU timeout once said "the streaming query
    # failed" because the JVM was still ending after 2 s. Asked only after a stop signal.
    code = _jvm_exit_code(STOPPING_JVM_S)
    return code in (-signals.signum, 128 + signals.signum)


def _query_failed(error: BaseException, plan: run_plan.Plan, heap: str) -> PidquotaError:
    """The one line a failed query ends with: a full disk, a JVM that died or ran out of
    memory, or else Spark's own error (its text printed first, as Spark's log of a query's end
    would have been the trace: conf/log4j2.properties denies it)."""
    known = _disk_full(error, plan) or _jvm_gone(error, heap) or _wrong_format(error)
    if known is not None:
        return known
    print(str(getattr(error, "desc", None) or error).rstrip(), file=sys.stderr)
    local = local_path(plan.checkpoint)
    where = None if local is None else checkpoints.failed_input(local)
    if where is None:
        return PidquotaError(f"the streaming query failed: {_first_line(error)}")
    return PidquotaError(
        f"the streaming query failed at {where}: {_first_line(error)}. A record there stopped it, "
        "and a run again stops at it again: move it out of the input (or start past it), and "
        "report the record to pidquota's maintainers: no record should stop the stream"
    )


def _wrong_format(error: BaseException) -> InputError | None:
    """The sink's format guard stopped the query (``formats.recognise.FormatGuard``): its line alone."""
    text = str(getattr(error, "desc", None) or error)
    found = re.search(
        r"pidquota\.conf\.errors\.InputError: (.+ the run stops here, and this batch is not written)", text
    )
    return InputError(found.group(1)) if found else None


def _jvm_gone(error: BaseException, heap: str) -> PidquotaError | None:
    """Spark's JVM died under the query (py4j lost it) or ran out of memory: one line with how,
    and a bigger ``heap`` to try, instead of py4j's or Java's trace. Out of memory is the
    likely cause of a death too (Spark exits 52 on it; the kernel's OOM killer is signal 9)."""
    from py4j.protocol import Py4JError, Py4JNetworkError

    oom = "OutOfMemoryError" in str(getattr(error, "desc", None) or error)
    if not oom and not isinstance(error, Py4JError | ConnectionError):  # py4j raises both
        return None
    code = _jvm_exit_code()
    if not oom and code is None and not isinstance(error, Py4JNetworkError):
        return None  # the JVM is there: a Java error of its own, or another connection's
    how = "out of memory" if oom else "it stopped answering"
    if code is not None:
        how = f"it was killed by signal {-code}" if code < 0 else f"it exited with code {code}"
    bigger = _bigger_heap(heap)
    advice = f"--set pidquota.spark.driver.memory={bigger}"
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # spark-submit started the JVM
        advice = f"spark-submit --driver-memory {bigger}"
    return PidquotaError(
        f"Spark's JVM died or ran out of memory during the run ({how}). Out of memory is the "
        f"usual cause: give it a bigger heap than its {heap}, e.g. {advice}, or fewer events per "
        "batch with pidquota.max.events.per.trigger; then run the same command again: it "
        "resumes from its checkpoint and loses nothing"
    )


def _jvm_exit_code(wait_s: float = 2.0) -> int | None:
    """:func:`pidquota.streaming.session.jvm_exit_code` (the tests stand in for it here)."""
    from pidquota.streaming.session import jvm_exit_code

    return jvm_exit_code(wait_s)


def _bigger_heap(heap: str) -> str:
    """Twice ``heap`` (a size as Spark writes it), and at least 4g."""
    kib = memory_kib(heap) or 0
    return f"{max(4, -(-2 * kib // 1024**2))}g"


def _sink(plan: run_plan.Plan, on_batch, summed: bool):
    """The sink, with every observer of its batches: the table, the exporter, and if ``summed``
    the end's summary (it keeps each user's new PIDs: only for --once, --duration and the demo,
    not for a production run without an end)."""
    from pidquota.observe.report.data import RunSummary
    from pidquota.streaming.outputs.sink import JsonlSink

    summary = RunSummary() if summed else None
    # the driver's quota reader looks at Redis after each batch: an outage is one warning, from here
    refresh = lambda batch_id, frames: plan.quotas.snapshot()  # noqa: E731
    observers = [f for f in (on_batch, plan.exporter and plan.exporter.observe_batch, refresh) if f]
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
        act=plan.act,
        guard=_format_guard(plan),
    )
    if plan.act is not None:  # the journal against the cluster: undo what expired while it was down
        sink.record_actions(plan.act.start())
    return sink, summary


def _say_end(args: argparse.Namespace, plan: run_plan.Plan, totals, summary) -> None:
    """The run's last lines: who was throttled, and what was written where."""
    from pidquota.observe.progress import counted

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
    _foreign_warning(plan.config, totals)
    if totals.anonymous:
        print(
            f"pidquota: warning: {totals.anonymous:,} decisions are for {ANONYMOUS}: Kafka names every client "
            "of a listener without authentication so, and one quota then covers them all; read an "
            "authenticated listener's clients (SASL or mTLS), or give User:ANONYMOUS a quota of its own",
            file=sys.stderr,
        )
    if totals.skipped:
        top = ", ".join(f"{k} {n:,}" for k, n in totals.skipped.most_common(4))
        more = " ..." if len(totals.skipped) > 4 else ""
        print(f"pidquota: skipped {sum(totals.skipped.values()):,} input lines of no interest ({top}{more})")
    if totals.dead_by_file:
        print(f"pidquota: dead letters by file: {_by_file(totals.dead_by_file)}")
    if plan.act is not None:
        dry = " (dry run: nothing changed on the cluster)" if plan.act.dry_run else ""
        print(f"pidquota: actuator{dry}: {plan.act.summary()}; every action in {plan.out}/actions/")
    print(
        f"pidquota: {totals.batches} batch{'es' if totals.batches != 1 else ''}; wrote "
        f"{counted(totals.rows['decisions'], 'decision')}, {counted(totals.rows['metrics'], 'metric row')}, "
        f"{counted(totals.rows['dead-letters'], 'dead letter')} under {plan.out}/"
    )


def _by_file(counts, shown: int = 3) -> str:
    """The files with the most dead letters: ``in/b.jsonl 30, in/a.jsonl 11 (and 2 more files)``."""
    from pidquota.observe.report.series import local_file

    top = ", ".join(f"{local_file(f)} {n:,}" for f, n in counts.most_common(shown))
    more = len(counts) - shown
    return top + (f" (and {more} more file{'s' if more > 1 else ''})" if more > 0 else "")


def _lines(
    spark, args: argparse.Namespace, config, kafka_input: str | None, checkpoint: str, speed: float, stop: str
):
    """The input as a stream of lines."""
    from pidquota.streaming import query as q
    from pidquota.streaming.outputs.kafka import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)  # the Kafka source, and the sink's Kafka outputs
    screen = config["pidquota.principal.max.length"]  # the sources screen their own lines
    if kafka_input:
        return q.kafka_source(spark, KafkaUrl.parse(kafka_input), config, stop, screen)
    if args.input is not None:
        max_files = config["pidquota.max.events.per.trigger"]
        fmt, follow = q.input_format(config), q.follows(config)
        return q.file_source(spark, args.input, max_files, checkpoint, stop, screen, fmt, follow)
    from pidquota.sources import stopping
    from pidquota.sources.demo import DemoDataSource

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


def _foreign_warning(config, totals) -> None:
    """After a run whose lines were all skipped as none of the format's (the request log's
    ``not-a-request``) and that decided nothing: the format is likely wrong."""
    if not totals.skipped or totals.rows["decisions"]:
        return
    fmt = formats.get(config["pidquota.input.format"])
    if not fmt.foreign or set(totals.skipped) != {fmt.foreign}:
        return
    default = registry.entry(registry.DEFAULT)
    print(
        f"pidquota: warning: none of the {totals.skipped[fmt.foreign]:,} lines read is a "
        f"{fmt.entry.noun.removesuffix('s')}; is --input-format right? ({default.noun} are --input-format "
        f"{default.name})",
        file=sys.stderr,
    )


def _format_guard(plan: run_plan.Plan):
    """The run's first records in the other format stop it in one line (a file input's files
    are sniffed before they are read; a topic's records only as they come)."""
    if plan.demo:
        return None
    from pidquota.formats.recognise import FormatGuard

    return FormatGuard(plan.config["pidquota.input.format"], plan.reads.describe())


def _progress():
    """A progress line per batch where no table shows (``--once``): ``observe/progress.py``."""
    from pidquota.observe.progress import Progress

    return Progress()


def _each(callbacks: list):
    """One ``on_batch`` that calls each of ``callbacks`` in turn (None if there are none)."""
    if not callbacks:
        return None

    def call(batch_id: int, frames: dict) -> None:
        for callback in callbacks:
            callback(batch_id, frames)

    return call


def _progress_observers(config, once: bool, exporter) -> list:
    """What looks at Spark's progress reports while the query runs."""
    from pidquota.observe.pace import Pace

    observers = [] if once else [Pace(config["pidquota.trigger.interval.ms"]).observe]
    return observers + ([exporter.observe_progress] if exporter is not None else [])


_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Invalid)): (.+)$")


def _disk_full(error: BaseException, plan: run_plan.Plan) -> PidquotaError | None:
    """A query stopped by a full disk, as one line: the sink's own :class:`DiskFull`, or a
    "No space left on device" from Spark (a checkpoint or state write, in Java), which names
    the output or checkpoint folder if one of them is nearly full, else the path in the
    message (a Spark local dir, say). None for other errors."""
    from pidquota.streaming.outputs.sink import DiskFull

    text = str(getattr(error, "desc", None) or error)
    ours = re.search(r"the disk is full under (.+?) \((?:[\d,]+ bytes free|free space unknown)\)", text)
    if ours:
        return DiskFull(ours.group(1))
    if "No space left on device" not in text and "Disk quota exceeded" not in text:
        return None
    folders = [f for f in (plan.out, plan.checkpoint) if "://" not in str(f)]
    full = [f for f in folders if _free_bytes(f) < NEARLY_FULL]
    if full:
        return DiskFull(full[0])
    line = next(x for x in text.splitlines() if "No space left" in x or "Disk quota exceeded" in x)
    named = re.search(r"(/[^\s:'\",]+)", line)
    return DiskFull(named.group(1) if named else f"{plan.checkpoint} or spark.local.dir")


NEARLY_FULL = 64 << 20  # free bytes under which an output or checkpoint folder counts as the full one


def _free_bytes(folder) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 1 << 62


def _first_line(error: BaseException) -> str:
    """The line of a (Java-wrapped) Python traceback that names the cause."""
    text = str(getattr(error, "desc", None) or error)
    found = []
    for line in text.splitlines():
        m = _EXCEPTION_LINE.match(line.strip())
        if m and not m.group(3).rstrip().endswith("(most recent call last):"):
            found.append(line.strip())
    ours = [x for x in found if x.startswith(("pidquota.", "PidquotaError", "CorruptStateError"))]
    if ours or found:
        return (ours or found)[0]
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__
