"""``pidquota actuator status|lift``: what the actuator holds on a cluster now, from its journal,
and lifting all of it (``actuate/``, docs/enforcing.md)."""

from __future__ import annotations

import argparse
import os
import socket
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
            act.actuator.journal.claim("lift")  # the journal is lift's now: a run still going acts no more
            rows = act.actuator.lift_journal()
            for row in rows:
                print(describe(row))
            failed = sum(r.action == "failed" for r in rows)
            print(f"pidquota: lifted {len(rows) - failed} control(s) on {options['kafka.bootstrap.servers']}")
            return 1 if failed else 0
        held = act.actuator.held()
        _status(held, options["kafka.bootstrap.servers"], config["pidquota.actuator.journal.topic"])
        if held:
            print(holder(act.actuator.journal.owner()))
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
        when = f"for {left / 1000:.0f} s more" if left > 0 else "expired: undone at the next start or lift"
        state = "as set" if same_value(current, entry.ours) else f"changed since to {shown_value(current)}"
        print(
            f"{entry.principal}: {entry.control.name} = {shown_value(entry.ours)} ({state}; the operator's "
            f"was {shown_value(entry.before)}), {when}"
        )


UNTIL = "nothing undoes them until a run starts on this journal, or `pidquota actuator lift`"


def holder(owner: dict | None) -> str:
    """Who undoes what the journal holds: the run that claimed it last, if it is still going
    (on this host, its process is looked up; elsewhere it cannot be), else nobody until a run
    starts or a lift."""
    if not owner or not isinstance(owner.get("pid"), int):
        return f"pidquota: the run that set them is not known; if none is going, {UNTIL}"
    pid, host = owner["pid"], str(owner.get("host") or "?")
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(owner.get("at_ms") or 0) / 1000))
    if owner.get("role") == "lift":  # a lift that left some: it ends when it is done
        return f"pidquota: the last to claim the journal was `pidquota actuator lift` (pid {pid} on {host}, since {since}): {UNTIL}"
    if host != socket.gethostname():
        return (
            f"pidquota: held by the run of pid {pid} on {host} (since {since}): it undoes each control when "
            f"its time is up, and all of them when it ends; if it is not running there, {UNTIL}"
        )
    if _running(pid):
        return (
            f"pidquota: held by the run of pid {pid} on this host (since {since}): it undoes each control "
            "when its time is up, and all of them when it ends"
        )
    return f"pidquota: the run that set them (pid {pid} on this host, since {since}) is not running: {UNTIL}"


def _running(pid: int) -> bool:
    """A pidquota process of that id is running here (a reused id of another program is not)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
        return any(a == b"pidquota" or a.endswith(b"/pidquota") for a in args)  # -m pidquota, or the script
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not os.path.isdir("/proc")  # /proc exists and the process is not in it: gone
