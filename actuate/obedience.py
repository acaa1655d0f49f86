"""Whether each broker obeys pidquota's plug-in state: pure, clock-free (``now_ms`` a parameter).

Each broker's plug-in writes a report to pidquota's status topic every
``REPORT_EVERY_MS`` (``plugin/.../StatusReporter.java``): whether it refuses what the set says
now, else why not; the newest heartbeat of pidquota's it has read. A broker **obeys** when its
newest report is fresh (at most ``STALE_MS`` old), says so, and has read a heartbeat of this
run's. A broker pidquota has no fresh report from does not obey: a plug-in that cannot read the
state topic (a wrong address, a missing ACL) usually cannot write either, and a broker without
the plug-in never reports. Until ``GRACE_MS`` after this run's first heartbeat, a broker that
has not yet reported is not judged.

Worked example: the run's first heartbeat at t=100 s. At t=110 s broker 1 has no report: not
judged yet (within the grace). At t=125 s broker 1's report of t=123 s says obeying with
heartbeat 120 s: obeys; broker 2's newest report is of t=90 s (before this run): does not obey,
"no report since pidquota began to beat"; broker 3's report of t=124 s says "refusing nothing
(pidquota's heartbeat is older than its bound)": does not obey, and the verdict gives its words.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

REPORT_EVERY_MS = 5_000  # the plug-in's StatusReporter.EVERY
STALE_MS = 20_000  # four reports missed, against a few seconds of clock skew
GRACE_MS = 20_000  # after this run's first heartbeat, time for every plug-in to read it and report


@dataclass(frozen=True)
class Report:
    """One broker's report, as its plug-in writes it."""

    broker: int
    at_ms: int
    obeying: bool
    why: str
    heartbeat_ms: int
    entries: int
    refused: int

    @classmethod
    def parse(cls, key: bytes | None, value: bytes | None) -> Report | None:
        """The report of a status record, or None when the record is not one (a tombstone, or
        bytes the plug-in would not write)."""
        if key is None or value is None or not key.startswith(b"broker:"):
            return None
        try:
            body = json.loads(value)
            report = cls(
                int(body["broker"]),
                int(body["at_ms"]),
                bool(body["obeying"]),
                str(body.get("why") or "")[:200],
                int(body["heartbeat_ms"]),
                int(body.get("entries") or 0),
                int(body.get("refused") or 0),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return report if key == f"broker:{report.broker}".encode() else None


@dataclass(frozen=True)
class Verdict:
    """``obeys`` True, False, or None (not judged yet); ``why``: in an operator's words."""

    broker: int
    obeys: bool | None
    why: str


def verdicts(
    reports: Mapping[int, Report], brokers: Iterable[int], first_beat_ms: int | None, now_ms: int
) -> list[Verdict]:
    """Each broker's verdict (the cluster's ``brokers`` and any that reported), by broker id;
    none before this run's first heartbeat (``first_beat_ms``)."""
    if first_beat_ms is None:
        return []
    waiting = now_ms - first_beat_ms < GRACE_MS
    out = []
    for broker in sorted(set(brokers) | set(reports)):
        out.append(_verdict(broker, reports.get(broker), first_beat_ms, now_ms, waiting))
    return out


def _verdict(broker: int, report: Report | None, first_beat_ms: int, now_ms: int, waiting: bool) -> Verdict:
    if report is None or report.at_ms < first_beat_ms:
        if waiting:
            return Verdict(broker, None, "no report yet")
        return Verdict(
            broker,
            False,
            "no report from its plug-in since pidquota began to beat (a plug-in that cannot reach the cluster or "
            "write pidquota's status topic, a broker without the plug-in, or a broker down)",
        )
    age = now_ms - report.at_ms
    if age > STALE_MS:
        return Verdict(
            broker,
            False,
            f"its plug-in's last report is {age // 1000} s old (it cannot reach the cluster, or the broker is down)",
        )
    if not report.obeying:
        return Verdict(broker, False, f"its plug-in refuses nothing: {report.why or 'no reason given'}")
    if report.heartbeat_ms < first_beat_ms:
        if waiting:
            return Verdict(broker, None, "it has not read this run's heartbeat yet")
        return Verdict(
            broker,
            False,
            "its plug-in has not read this run's heartbeat: it reads the state topic late, or not at all",
        )
    return Verdict(
        broker, True, f"obeys ({report.entries} entries, {report.refused} refused since its start)"
    )


def said(verdict: Verdict) -> str:
    """A verdict as a line's words: ``broker 2 does not obey pidquota's plug-in state: ...``."""
    if verdict.obeys is None:
        return f"broker {verdict.broker}: not known yet ({verdict.why})"
    if verdict.obeys:
        return (
            f"broker {verdict.broker} obeys pidquota's plug-in state ({verdict.why.removeprefix('obeys (')}"
        )
    return f"broker {verdict.broker} does NOT obey pidquota's plug-in state: {verdict.why}"
