"""What ``pidquota run`` settles before Spark starts: the settings in force, the start-up checks
(``preflight``, ``checkpoints``, ``output_folder``) in the order that fails fastest, the checkpoint's state store and replay time,
the Prometheus endpoint, and the banner that says what the run does."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pidquota.formats as formats
from pidquota.cli import checkpoints, output_folder, preflight
from pidquota.cli.common import input_overrides
from pidquota.conf import formats as registry
from pidquota.conf.durations import parse_duration_ms
from pidquota.conf.errors import ConfigError, PidquotaError
from pidquota.conf.loader import load, parse_overrides
from pidquota.conf.paths import local_path
from pidquota.quota import QuotaSettings
from pidquota.store.kafka import KafkaUrl, output_options
from pidquota.store.quotas import quota_source

DEMO_PROMETHEUS_PORT = 9464


@dataclass
class Plan:
    """What ``pidquota run`` settled before Spark starts."""

    config: object
    quotas: object
    publish: object
    out: Path
    checkpoint: str
    kafka_input: str | None
    kafka_out: dict | None
    reads: checkpoints.Source
    resumed: bool
    replay_ms: int | None
    exporter: object
    act: object = None  # the actuator (pidquota.actuate.runner.BatchActuator), or None when off

    @property
    def demo(self) -> bool:
        return self.reads.kind == "demo"


def plan(args: argparse.Namespace, cleanup: contextlib.ExitStack) -> Plan:
    """Every start-up check, in the order that fails fastest; nothing here starts Spark."""
    kafka_input = args.input if args.input and args.input.startswith("kafka://") else None
    preflight.check_flags(args, kafka_input is not None)
    if args.duration is not None:
        parse_duration_ms(args.duration)
    config = load(args.config, run_overrides(args))
    preflight.check_quotas_flag(args, config)
    preflight.check_acting_quotas(args, config)
    quotas, publish = quota_source(config)
    out = Path(args.output)
    checkpoint = config["pidquota.checkpoint.location"] or str(out / "_checkpoint")
    if kafka_input:
        KafkaUrl.parse(kafka_input)  # a malformed URL fails now, before Spark starts
    kafka_out = output_options(config, kafka_input)
    _say_login_mismatch(config, kafka_input is not None)
    reads, resumed = _start_up_checks(args, config, out, checkpoint)
    config = _checkpoint_state_store(config, checkpoint)
    config, replay_ms = _replay(config, checkpoint, kafka_input is not None)
    act = _actuator(config, kafka_input, kafka_out)
    if act is not None:
        cleanup.callback(act.close)
    exporter = _exporter(config, args.input is None)
    if exporter is not None:
        cleanup.callback(exporter.close)
        if act is not None:
            exporter.watch_actuator(lambda: len(act.acted))
            exporter.watch_plugin(act.obedience)
    return Plan(
        config,
        quotas,
        publish,
        out,
        checkpoint,
        kafka_input,
        kafka_out,
        reads,
        resumed,
        replay_ms,
        exporter,
        act,
    )


def _say_login_mismatch(config, kafka_input: bool) -> None:
    """pidquota's principal as given against the login its settings make, said in one line
    before anything is made on a cluster (the start-up checks make the plug-in's inits topic
    with ACLs for that principal; the actuator, its journal and the state topic). Said, not
    refused: a broker's own principal builder may name a login otherwise."""
    if not (kafka_input or preflight.acts(config)):
        return
    from pidquota.actuate.journal import login_mismatch
    from pidquota.store.kafka import security_options

    mismatch = login_mismatch(config["pidquota.actuator.principal"], security_options(config))
    if mismatch:
        print(f"pidquota: {mismatch}", file=sys.stderr)


def _actuator(config, kafka_input: str | None, kafka_out: dict | None):
    """The actuator the settings ask for (None when off). A shadow run only says what it would
    do. Acting needs the cluster now: one that does not answer fails the start, in one line."""
    mode = config["pidquota.actuator"]
    if mode == "off":
        return None
    from pidquota.actuate.runner import BatchActuator, cluster_options

    fallback = (
        KafkaUrl.parse(kafka_input).bootstrap
        if kafka_input
        else (kafka_out or {}).get("kafka.bootstrap.servers")
    )
    if mode == "dry-run" or config["pidquota.mode"] == "shadow":  # the operator's values, read only
        known = bool(fallback or config["pidquota.actuator.bootstrap"].strip())
        return BatchActuator(config, None, peek=cluster_options(config, fallback) if known else None)
    return BatchActuator(config, cluster_options(config, fallback))


def actuator_shown(config, act) -> str:
    """The banner's words on the actuator: empty when off."""
    if act is None:
        return ""
    mechanism = act.mechanism
    if mechanism.startswith("request-quota"):
        parts = [f"request_percentage {config['pidquota.actuator.request.percentage']:g}"]
        fmt = registry.entry(config["pidquota.input.format"])
        if mechanism != "request-quota" and "client_address" in fmt.clients:
            rate = config["pidquota.actuator.connection.rate"]
            parts.append(f"connection_creation_rate {rate:g} on each client address a user has to itself")
        elif mechanism != "request-quota":
            naming = " or ".join(e.name for e in registry.FORMATS if "client_address" in e.clients)
            parts.append(f"no connection rate: the clients' addresses come only from {naming}")
        mechanism += f" ({'; '.join(parts)})"
    elif mechanism == "broker-plugin":
        mechanism += (
            f" (the state topic {config['pidquota.actuator.plugin.topic']}, obeyed by brokers that run "
            "pidquota's plug-in; they refuse new PIDs and nothing else)"
        )
    why = f" ({act.why})" if act.why else ""
    hold = config["pidquota.actuator.hold.ms"] / 1000
    how = "DRY RUN: " if act.dry_run else ""
    if act.dry_run and act.actuator.peek is None:
        how = "DRY RUN (no cluster given, so no operator's value is read; pidquota.actuator.bootstrap names one): "
    where = "" if act.dry_run else f" on {act.options['kafka.bootstrap.servers']}"
    end = "lifted when the run ends"
    if getattr(act, "hand_over", False) and mechanism.startswith("broker-plugin") and not act.dry_run:
        bound = config["pidquota.actuator.plugin.heartbeat.ms"] / 1000
        end = f"handed to the next run when this one ends (obeyed {bound:g} s more without one)"
    return (
        f"pidquota: actuator {how}{mechanism}{where}{why} for throttled users, held {hold:g} s past their "
        f"throttle, at most {config['pidquota.actuator.max.principals']} at once, and {end}; actions in "
        "OUTPUT/actions/" + (f". {act.loop_said()}" if act.loop_said() else "")
    )


def reading(config, reads: checkpoints.Source) -> tuple[str, bool]:
    """How the input is read: its format, and whether its files are followed."""
    from pidquota.sources.follow import follows

    return config["pidquota.input.format"], reads.kind == "file" and follows(config)


def run_overrides(args: argparse.Namespace) -> dict[str, str]:
    """``--set`` plus the flags that are shorthands for settings."""
    overrides = {**parse_overrides(args.set), **input_overrides(args)}
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


def _start_up_checks(
    args: argparse.Namespace, config, out: Path, checkpoint: str
) -> tuple[checkpoints.Source, bool]:
    """The input is there (a Kafka input's brokers answer), ``--fresh`` deleted what it should,
    and the checkpoint is this source's. Returns the source and whether the run resumes a
    checkpoint. A file input's hidden names and files changed since they were read are named
    on stderr."""
    reads = checkpoints.Source.of(args.input)
    preflight.check_input(reads)
    if reads.kind == "file":
        preflight.check_output_outside(args.input, out)
    fmt = registry.entry(config["pidquota.input.format"])
    why = fmt.refuses("file" if reads.kind == "demo" else reads.kind, reads.describe())  # the demo: lines
    if why:
        raise ConfigError(why)
    formats.get(fmt.name).options(
        config
    )  # the format's own settings (the audit's owners, Redis): one line now
    if reads.kind == "kafka":
        preflight.make_plugin_topic(KafkaUrl.parse(args.input), config)
        preflight.check_kafka(KafkaUrl.parse(args.input), config)
    preflight.check_local_checkpoint(checkpoint, reads.kind == "file")
    if args.fresh:
        output_folder.fresh(out, checkpoint)
    checkpoints.check_checkpoint(checkpoint, reads, out)
    checkpoints.check_reading(checkpoint, *reading(config, reads))
    checkpoints.check_output_batches(checkpoint, out)
    if reads.kind != "file":
        ckpt = local_path(checkpoint)
        return reads, ckpt is not None and (ckpt / "offsets").is_dir()
    from pidquota.sources.listing import start_up_notes

    notes, resumed = start_up_notes(args.input, checkpoint, config["pidquota.input.format"])
    for note in notes:
        print(f"pidquota: {note}", file=sys.stderr)
    ckpt = local_path(checkpoint)  # followed files keep no file ledger: the offsets say it
    return reads, resumed or (ckpt is not None and (ckpt / "offsets").is_dir())


def _checkpoint_state_store(config, checkpoint: str):
    """The config with the checkpoint's state store, if it has one and the setting was left
    at its default (one line says so); a store given otherwise is refused, and so is a state
    layout other than the checkpoint's, or one the store cannot keep."""
    key = "pidquota.state.store"
    layout = config["pidquota.state.layout"]
    store = checkpoints.check_state_layout(
        checkpoint, config["pidquota.state.buckets"], config[key], config.given(key), layout
    )
    if layout == "principals" and store != "rocksdb":
        raise ConfigError(
            f"pidquota.state.layout=principals keeps each principal as its own state entry with Spark's "
            f"transformWithStateInPandas, which needs {key}=rocksdb, not {store}; set {key}=rocksdb, "
            "or keep pidquota.state.layout=groups"
        )
    if store == config[key]:
        return config
    print(f"pidquota: the checkpoint keeps its state in {key}={store}; using it", file=sys.stderr)
    return config.replace(key, store, "checkpoint")


def _replay(config, checkpoint: str, kafka_input: bool):
    """The config and the replay time in force (``streaming/replay.py``). A Kafka input on a new
    checkpoint starts where the replay must begin, unless --starting-offsets says otherwise."""
    from pidquota.streaming import replay

    if config[replay.KEY].strip() == "now" and local_path(checkpoint) is None:
        raise PidquotaError(
            f"--rebuild (--replay-until now) records its time in the checkpoint, and {checkpoint} is not "
            "a local folder pidquota can write to; give the time itself: --replay-until EPOCH_MS"
        )
    progress = local_path(checkpoint) is not None and checkpoints.has_progress(local_path(checkpoint))
    recorded = checkpoints.recorded_replay(checkpoint)
    until, note = replay.replay_until(config[replay.KEY], recorded, progress, int(time.time() * 1000))
    if note:
        print(f"pidquota: {note}", file=sys.stderr)
    offsets = "pidquota.kafka.starting.offsets"
    if until is not None and kafka_input and not progress and not config.given(offsets):
        start = replay.replay_start_ms(until, QuotaSettings.from_config(config))
        config = config.replace(offsets, str(start), "--replay-until")
    return config, until


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


def banner(args: argparse.Namespace, config, checkpoint: str, speed: float, replay_ms=None) -> str:
    """What the run does, where it writes, and whether it resumes a checkpoint."""
    quotas = _quotas_shown(args, config)
    done = checkpoints.last_batch(checkpoint)
    start = "new checkpoint" if done is None else f"resuming after batch {done}"
    if local_path(checkpoint) is None:
        start = f"checkpoint {checkpoint}"
    what = f"demo at {speed:g}x event time" if args.input is None else f"reading {args.input}"
    fmt = config["pidquota.input.format"]
    if args.input is not None and fmt != registry.DEFAULT:
        what += f" as {fmt}" + formats.get(fmt).said(config)
    until = "until all of it is read" if args.once else "Ctrl-C to stop"
    mode = "SHADOW (nothing published as throttled), " if config["pidquota.mode"] == "shadow" else ""
    if replay_ms is not None:
        from pidquota.store.decisions import event_time

        start += f"; events before {event_time(replay_ms)} only rebuild state"
    return f"pidquota: {mode}{what}, quotas from {quotas}, output in {folder_shown(args.output)} ({start}); {until}"


def _quotas_shown(args: argparse.Namespace, config) -> str:
    """Where the quotas come from. The shipped file is the demo's: a run on the user's own data
    that falls back to it says so, and how to give theirs."""
    if config["pidquota.redis.url"]:
        return "Redis"
    path = config.quotas_path()
    if args.input is None or config["pidquota.quotas.file"]:
        return str(path)
    return (
        f"{path} -- the demo's quotas, not yours (give yours with --quotas FILE, "
        "or --quota-store redis://HOST:PORT/DB for quotas set with pidquota configs)"
    )


def folder_shown(path: str) -> str:
    """A folder as the banner shows it: with one trailing slash (``out/`` for ``out`` or ``out/``)."""
    return path if path.endswith("/") else path + "/"
