"""``pidquota clients``: real idempotent producers that crash-loop or stay steady, against a
real broker (``traffic/clients.py``), so that its request log and its record batches show
the PIDs a misbehaving client causes."""

from __future__ import annotations

import argparse
import sys
import time

from pidquota.cli.common import add_config_flags, load_settings
from pidquota.conf.durations import EXAMPLES, parse_duration_ms
from pidquota.conf.errors import ConfigError
from pidquota.observe.progress import Ticker


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "clients",
        help="run real crash-looping or steady producers against a broker",
        description="Real Kafka producers (kafka-python, idempotent): a crash loop opens a new "
        "producer for every few records, so every restart gets a new producer id; a steady "
        "producer keeps one. The principal is the client's (SASL: --set pidquota.kafka.sasl.*).",
    )
    p.add_argument("--to", metavar="URL", required=True, help="kafka://HOST[:PORT]/TOPIC to produce to")
    p.add_argument(
        "--behaviour", choices=("crash-loop", "steady"), required=True, help="what the client does"
    )
    p.add_argument("--duration", default="10m", help=f"how long to run: {EXAMPLES} (%(default)s)")
    p.add_argument(
        "--rate",
        type=float,
        default=1.0,
        help="crash-loop: restarts per second; steady: batches per second (%(default)s)",
    )
    p.add_argument("--records", type=int, default=3, help="records per restart or batch (%(default)s)")
    add_config_flags(p)
    return p


def run(args: argparse.Namespace) -> int:
    from pidquota.store.kafka import KafkaUrl, producer, security_options
    from pidquota.traffic import clients

    if args.rate <= 0 or args.records < 1:
        raise ConfigError(f"--rate must be > 0 and --records >= 1, got {args.rate} and {args.records}")
    duration_s = parse_duration_ms(args.duration) / 1000
    url = KafkaUrl.parse(args.to)
    options = {"kafka.bootstrap.servers": url.bootstrap, **security_options(load_settings(args))}

    def make():
        return producer(options, client_id=f"pidquota-{args.behaviour}", linger_ms=0)

    gap = 1 / args.rate
    if args.behaviour == "steady":  # one producer, one PID, for the whole run
        sent = clients.steady(make, url.topic, max(1, int(duration_s * args.rate)), args.records, gap)
    else:
        sent, end, ticker = clients.Sent(), time.monotonic() + duration_s, Ticker()
        while time.monotonic() < end:
            ticker.tick(
                lambda: (
                    f"pidquota: clients: {sent.records:,} records sent, {len(set(sent.pids))} producer ids"
                )
            )
            one = clients.crash_loop(make, url.topic, 1, args.records, gap)
            sent.records += one.records
            sent.pids += one.pids
        ticker.close()
    print(
        f"pidquota: {args.behaviour} sent {sent.records:,} records under {len(set(sent.pids))} producer id(s)",
        file=sys.stderr,
    )
    return 0
