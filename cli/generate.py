"""``pidquota generate``: realistic produce-request events, to a file or a Kafka topic."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pidquota.cli.blocks import add_block_store_flags, block_store
from pidquota.cli.common import load_settings
from pidquota.conf.durations import EXAMPLES, parse_duration_ms
from pidquota.conf.errors import ConfigError
from pidquota.observe.progress import Ticker
from pidquota.traffic.generator import DEFAULT_START_MS, TrafficGenerator
from pidquota.traffic.mixes import MIXES
from pidquota.traffic.request_log import RequestLog


def add_parser(sub) -> argparse.ArgumentParser:
    gen = sub.add_parser(
        "generate",
        help="write realistic produce-request events, or the brokers' request log of them",
        description="Simulate a Kafka cluster's producers (KIP-730 PID blocks, KIP-360 epochs, rogue "
        "clients) and write their produce-request events as JSON lines.",
    )
    gen.add_argument("--duration", default="1h", help=f"event time to generate: {EXAMPLES} (%(default)s)")
    gen.add_argument("--seed", type=int, default=7, help="random seed: same seed, same events (%(default)s)")
    gen.add_argument("--brokers", type=int, default=6, help="brokers in the cluster (%(default)s)")
    gen.add_argument("--mix", default="default", help=f"a named mix ({', '.join(MIXES)}) or a JSON mix file")
    gen.add_argument(
        "--rate", type=float, default=200.0, help="requests/s of event time from the well-behaved producers"
    )
    target = gen.add_mutually_exclusive_group(required=True)
    target.add_argument("--output", metavar="FILE.jsonl", help="write the events to this file")
    target.add_argument(
        "--to", metavar="URL", help="produce the events to kafka://HOST:PORT/TOPIC, keyed by principal"
    )
    gen.add_argument(
        "--summary",
        metavar="FILE",
        help="per-principal summary (default: .OUTPUT.summary.json beside the output, hidden so that "
        "a run over the folder does not read it; with --to: stderr only)",
    )
    gen.add_argument(
        "--start", type=int, default=DEFAULT_START_MS, help="first event time, ms since the epoch"
    )
    gen.add_argument(
        "--format",
        choices=("events", "kafka-request-log"),
        default="events",
        help="pidquota's JSON events, or the brokers' request log of the same traffic "
        "(INIT_PRODUCER_ID, PRODUCE and --noise other lines, as kafka.request.logger writes them) "
        "(%(default)s)",
    )
    gen.add_argument(
        "--noise",
        type=int,
        default=10,
        help="with --format kafka-request-log: FETCH and METADATA lines per produce request (%(default)s)",
    )
    gen.add_argument(
        "--speed", type=float, help="pace: event time this many times faster than the wall clock"
    )
    add_block_store_flags(gen)
    return gen


def run(args: argparse.Namespace) -> int:
    duration = parse_duration_ms(args.duration)
    if args.speed is not None and args.speed <= 0:
        raise ConfigError(f"--speed must be > 0, got {args.speed}")
    gen = TrafficGenerator(
        seed=args.seed,
        brokers=args.brokers,
        mix=args.mix,
        rate=args.rate,
        start_ms=args.start,
        store=block_store(args),
    )
    chunk_ms = 10_000 if args.speed else 60_000
    wall0 = time.monotonic()
    if args.noise < 0:
        raise ConfigError(f"--noise must be >= 0, got {args.noise}")
    log = RequestLog(args.noise) if args.format == "kafka-request-log" else None
    ticker = Ticker()
    with _EventSink(args) as sink:
        for lines, keys in gen.keyed_chunks(duration, chunk_ms=chunk_ms):
            if log is not None:  # lines of the brokers' request log, unkeyed
                lines, keys = list(log.lines(lines)), None
            sink.write(lines, keys)
            ticker.tick(lambda: _progress(gen, duration, sink.count, log is not None))
            if args.speed:
                sink.flush()
                ahead = (gen.now_ms - gen.start_ms) / args.speed / 1000 - (time.monotonic() - wall0)
                if ahead > 0:
                    time.sleep(ahead)
    ticker.close()
    count = sink.count
    summary = {"events": count, "seed": args.seed, "duration_ms": duration, **gen.summary()}
    summary_path = Path(args.summary) if args.summary else None
    if summary_path is None and args.output:
        # Hidden: beside the output it would be read with it (as a rolled log, or as events).
        summary_path = Path(args.output).with_name("." + Path(args.output).name + ".summary.json")
    if summary_path is not None:
        summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    secs = time.monotonic() - wall0
    where = args.output or args.to
    print(
        f"pidquota: wrote {count:,} {'request-log lines' if log else 'events'} to {where} in {secs:.1f} s; "
        f"summary in {summary_path or '-'}",
        file=sys.stderr,
    )
    for principal, s in summary["principals"].items():
        print(
            f"  {principal:<24} {s['behaviour']:<14} {s['distinct_pids']:>7} PIDs {s['events']:>10,} events",
            file=sys.stderr,
        )
    return 0


class _EventSink:
    """JSON lines to a file, or records to a Kafka topic keyed by principal."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.count = args, 0
        self._file = self._producer = None

    def __enter__(self) -> _EventSink:
        if self.args.output:
            out = Path(self.args.output)
            out.parent.mkdir(parents=True, exist_ok=True)
            self._file = out.open("w", encoding="utf-8")
        else:
            from pidquota.store.kafka import KafkaUrl, producer, security_options

            url = KafkaUrl.parse(self.args.to)
            self.topic = url.topic
            options = {"kafka.bootstrap.servers": url.bootstrap, **security_options(load_settings(self.args))}
            self._producer = producer(options, client_id="pidquota-generate")
        return self

    def write(self, lines: list[str], keys: list[str] | None) -> None:
        if not lines:
            return
        if self._file is not None:
            self._file.write("\n".join(lines))
            self._file.write("\n")
        else:
            for line, key in zip(lines, keys or [None] * len(lines), strict=True):
                self._producer.send(self.topic, key=key.encode() if key else None, value=line.encode())
        self.count += len(lines)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
        else:
            self._producer.flush()

    def __exit__(self, *exc) -> None:
        if self._file is not None:
            self._file.close()
        if self._producer is not None:
            self._producer.flush()
            self._producer.close()


def _progress(gen, duration_ms: int, count: int, lines: bool) -> str:
    return (
        f"pidquota: generate: {_clock(gen.now_ms - gen.start_ms)} of {_clock(duration_ms)} generated, "
        f"{count:,} {'lines' if lines else 'events'} written"
    )


def _clock(ms: int) -> str:
    """Event time as ``H:MM:SS``."""
    s = max(0, int(ms // 1000))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
