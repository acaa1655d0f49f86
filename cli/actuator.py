"""``pidquota actuator status|lift``: what the actuator holds on a cluster now, from its journal,
and lifting all of it (``actuate/``, docs/enforcing.md)."""

from __future__ import annotations

import argparse
import os
import socket
import time

from pidquota.actuate.controls import ClientThrottleKey, ThrottleKey, same_value, shown_value
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
        open_ = _plugin(act, held)
        _status(held, options["kafka.bootstrap.servers"], config["pidquota.actuator.journal.topic"], open_)
        if held:
            plugin_only = all(isinstance(e.control, ThrottleKey | ClientThrottleKey) for e, _ in held)
            print(
                holder(
                    act.actuator.journal.owner(), plugin_only and config["pidquota.actuator.plugin.hand.over"]
                )
            )
        return 0
    finally:
        act.close()


def _status(held: list, where: str, topic: str, open_: str = "") -> None:
    """One line per control held; ``open_``: why the brokers obey no plug-in throttle now."""
    if not held:
        print(f"pidquota: the actuator holds nothing on {where} (journal topic {topic})")
        return
    now = time.time() * 1000
    for entry, current in sorted(held, key=lambda h: (h[0].principal, h[0].control.name)):
        left = entry.until_ms - now
        when = f"for {left / 1000:.0f} s more" if left > 0 else "expired: undone at the next start or lift"
        state = "as set" if same_value(current, entry.ours) else f"changed since to {shown_value(current)}"
        unbound = (
            f"; NOT obeyed: {open_}"
            if open_ and isinstance(entry.control, ThrottleKey | ClientThrottleKey)
            else ""
        )
        print(
            f"{entry.principal}: {entry.control.name} = {shown_value(entry.ours)} ({state}; the operator's "
            f"was {shown_value(entry.before)}), {when}{unbound}"
        )


def _plugin(act, held: list) -> str:
    """The plug-in's heartbeat and each broker's report, when the run acts through the plug-in
    or the journal holds a plug-in throttle; returns why the brokers obey none now ("" when
    they may)."""
    from pidquota.actuate.controls import ControlError
    from pidquota.actuate.obedience import said, verdicts
    from pidquota.actuate.runner import PLUGIN

    plugin = any(isinstance(e.control, ThrottleKey | ClientThrottleKey) for e, _ in held)
    state = act.actuator.controls.state
    if not (plugin or act.mechanism == PLUGIN) or state is None:
        return ""
    try:
        beat = state.heartbeat()
    except ControlError as exc:
        print(f"pidquota: the plug-in's state cannot be read: {exc}")
        return "its state could not be read"
    try:
        reports = state.reports()
    except ControlError as exc:  # the brokers' reports alone: the heartbeat still says what binds
        print(f"pidquota: the brokers' reports cannot be read: {exc}")
        reports = {}
    now = int(time.time() * 1000)
    if beat is None:
        print(
            f"pidquota: no heartbeat in the plug-in's state topic {state.topic}: every broker's plug-in refuses nothing (fail open)"
        )
        return "no heartbeat: the brokers fail open"
    at, bound = beat
    age = now - at
    if age > bound:
        print(
            f"pidquota: the plug-in's heartbeat is {age / 1000:.0f} s old, over its bound ({bound / 1000:g} s): "
            "every broker's plug-in refuses nothing (fail open); no run beats on this state topic"
        )
        open_ = f"the heartbeat is {age / 1000:.0f} s old, the brokers fail open"
    else:
        print(
            f"pidquota: the plug-in's heartbeat is {max(age, 0) / 1000:.0f} s old (bound {bound / 1000:g} s): "
            f"the brokers obey the state for {(bound - age) / 1000:.0f} s more unless another beat comes"
        )
        open_ = ""
    try:
        brokers = sorted(act.actuator.controls.authorizers())
    except ControlError:
        brokers = sorted(reports)  # those that reported, at least
    for verdict in verdicts(reports, brokers, at - bound, now):
        print(f"pidquota: {said(verdict)}")
    return open_


UNTIL = "nothing undoes them until a run starts on this journal, or `pidquota actuator lift`"


def holder(owner: dict | None, handed: bool = False) -> str:
    """Who undoes what the journal holds: the run that claimed it last, if it is still going
    (on this host, its process is looked up; elsewhere it cannot be), else nobody until a run
    starts or a lift. ``handed``: plug-in throttles alone, which a run hands to the next one
    when it ends (``pidquota.actuator.plugin.hand.over``)."""
    ends = "hands them to the next run when it ends" if handed else "all of them when it ends"
    if not owner or not isinstance(owner.get("pid"), int):
        return f"pidquota: the run that set them is not known; if none is going, {UNTIL}"
    pid, host = owner["pid"], str(owner.get("host") or "?")
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(owner.get("at_ms") or 0) / 1000))
    if owner.get("role") == "lift":  # a lift that left some: it ends when it is done
        return f"pidquota: the last to claim the journal was `pidquota actuator lift` (pid {pid} on {host}, since {since}): {UNTIL}"
    if host != socket.gethostname():
        return (
            f"pidquota: held by the run of pid {pid} on {host} (since {since}): it undoes each control when "
            f"its time is up, and {ends}; if it is not running there, {UNTIL}"
        )
    if _running(pid):
        return (
            f"pidquota: held by the run of pid {pid} on this host (since {since}): it undoes each control "
            f"when its time is up, and {ends}"
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
