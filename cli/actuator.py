"""``pidquota actuator status|lift``: what the actuator holds on a cluster now, from its journal,
and lifting all of it (``actuate/``, docs/enforcing.md)."""

from __future__ import annotations

import argparse
import time

from pidquota.actuate.controls import same_value, shown_value
from pidquota.cli.common import add_config_flags, load_settings


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "actuator",
        help="what the actuator holds on a cluster now, and lifting it",
        description="Read the actuator's journal on a Kafka cluster: what pidquota has set there "
        "(status), or undo all of it now (lift), putting back each operator's value exactly. Lift "
        "takes the journal over: a run still going on it acts no more (its next change is fenced).",
    )
    p.add_argument("action", choices=("status", "lift"), help="status: show; lift: undo everything")
    p.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        help="the cluster (default: pidquota.actuator.bootstrap); its security settings as the run's",
    )
    add_config_flags(p)
    return p


def run(args: argparse.Namespace) -> int:
    from pidquota.actuate.runner import BatchActuator, cluster_options, describe

    overrides = {"pidquota.actuator.bootstrap": args.bootstrap} if args.bootstrap else {}
    config = load_settings(args, **overrides)
    options = cluster_options(config, None, "give --bootstrap HOST:PORT (or set pidquota.actuator.bootstrap)")
    act = BatchActuator(config, options)
    try:
        if args.action == "lift":
            act.actuator.journal.claim()  # the journal is lift's now: a run still going acts no more
            rows = act.actuator.lift_journal()
            for row in rows:
                print(describe(row))
            failed = sum(r.action == "failed" for r in rows)
            print(f"pidquota: lifted {len(rows) - failed} control(s) on {options['kafka.bootstrap.servers']}")
            return 1 if failed else 0
        held = act.actuator.held()
        _status(held, options["kafka.bootstrap.servers"], config["pidquota.actuator.journal.topic"])
        return 0
    finally:
        act.close()


def _status(held: list, where: str, topic: str) -> None:
    if not held:
        print(f"pidquota: the actuator holds nothing on {where} (journal topic {topic})")
        return
    now = time.time() * 1000
    for entry, current in sorted(held, key=lambda h: (h[0].principal, h[0].control.name)):
        left = entry.until_ms - now
        when = (
            f"for {left / 1000:.0f} s more (then undone by the run that holds it, if one is going; else by the "
            "next run's start or `pidquota actuator lift`)"
            if left > 0
            else "expired: undone at the next start or lift"
        )
        state = "as set" if same_value(current, entry.ours) else f"changed since to {shown_value(current)}"
        print(
            f"{entry.principal}: {entry.control.name} = {shown_value(entry.ours)} ({state}; the operator's "
            f"was {shown_value(entry.before)}), {when}"
        )
