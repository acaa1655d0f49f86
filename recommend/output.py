"""``pidquota recommend``'s output: the table, the JSON and the ``pidquota configs`` script, from
the statistics of :mod:`pidquota.recommend.stats` (or of the Spark job, which has the same
columns). Nothing here computes a number that decides a quota."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import asdict

import numpy as np
import pandas as pd

from pidquota.quota.resolver import DEFAULT_ENTITY, QUOTA_KEY
from pidquota.recommend.stats import PERCENTILE_METHOD, USAGE_COLUMNS, Basis, DefaultSuggestion

SUGGESTED_RULE = "suggested = max(1, ceil(p99 x headroom))"


DEFAULT_RULE = (
    "<default> = max(1, ceil(v_k)), v_1 <= ... <= v_n the users' max x headroom, k = ceil(share x n)"
)


def _order(usage: pd.DataFrame) -> pd.DataFrame:
    """Busiest first: by max descending, then principal."""
    return usage.sort_values(["max", "principal"], ascending=[False, True], kind="stable")


def _utc(ms) -> str | None:
    if ms is None or pd.isna(ms):
        return None
    return pd.Timestamp(int(ms), unit="ms", tz="UTC").strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _num(x: float) -> str:
    return f"{x:.2f}"


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s" if ms % 1000 == 0 else f"{ms} ms"


def _rows(usage: pd.DataFrame, what_if: pd.DataFrame | None) -> list[dict]:
    """One dict per principal, busiest first, with the what-if columns when given."""
    rows = _order(usage).to_dict("records")
    if what_if is not None:
        extra = {r["principal"]: r for r in what_if.to_dict("records")}
        for r in rows:
            w = extra.get(r["principal"], {})
            r["what_if"] = {
                k: w.get(k) for k in ("quota", "throttles", "first_throttle_ms", "longest_throttle_ms")
            }
    return rows


def table(
    usage: pd.DataFrame,
    what_if: pd.DataFrame | None = None,
    default: DefaultSuggestion | None = None,
    basis: Basis | None = None,
) -> str:
    """Aligned plain text: a row per principal (busiest first), then the rules and the default."""
    header = ["principal", "p50/W", "p99/W", "max/W", "active PIDs", "suggested"]
    if what_if is not None:
        header += ["quota", "throttles", "first throttle (UTC)", "longest throttle (s)"]
    lines = [header]
    for r in _rows(usage, what_if):
        cells = [r["principal"], _num(r["p50"]), _num(r["p99"]), str(r["max"]), str(r["active_pids"])]
        cells.append(str(r["suggested"]) + ("" if r["fits"] else " *"))
        if what_if is not None:
            w = r["what_if"]
            quota, longest = w["quota"], w["longest_throttle_ms"]
            cells += [
                "unlimited" if quota is None else f"{quota:g}",
                str(w["throttles"] or 0),
                _utc(w["first_throttle_ms"]) or "-",
                "-" if longest is None or pd.isna(longest) else f"{int(longest) / 1000:.3f}",
            ]
        lines.append(cells)
    return "\n".join([_align(lines), *_notes(usage, default, basis)])


def _align(lines: list[list[str]]) -> str:
    """The principal column left-aligned, the others right-aligned, two spaces apart."""
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]))]
    out = []
    for row in lines:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def _notes(usage: pd.DataFrame, default: DefaultSuggestion | None, basis: Basis | None) -> list[str]:
    notes = [""]
    if basis is not None:
        notes.append(
            f"New PIDs per window W = {_seconds(basis.window_ms)}: p50 and p99 over windows starting every "
            f"{_seconds(basis.slide_ms)} ({PERCENTILE_METHOD} percentiles), max over every window."
        )
        notes.append(f"{SUGGESTED_RULE}, headroom {basis.headroom:g}.")
    if not usage["fits"].all():
        notes.append("* max/W is above the suggestion: it may throttle this user (--what-if tells).")
    if default is not None:
        notes.append(
            f"Suggested <default>: {default.rate} ({DEFAULT_RULE}, share {default.share:g}); "
            f"{default.covered} of {default.users} users have max/W <= {default.rate} and would never "
            "have been throttled by it."
        )
    notes.append("Nothing was applied.")
    return notes


def _json_value(v):
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def to_json(
    usage: pd.DataFrame,
    what_if: pd.DataFrame | None = None,
    default: DefaultSuggestion | None = None,
    basis: Basis | None = None,
) -> str:
    """One JSON document: ``basis``, ``rules``, ``default`` (or null) and ``users`` (busiest
    first), each user with every :data:`USAGE_COLUMNS` key and ``what_if`` (null without a
    what-if; else quota, throttles, first_throttle_ms, first_throttle_utc, longest_throttle_ms)."""
    users = []
    for r in _rows(usage, what_if):
        user = {k: _json_value(r[k]) for k in USAGE_COLUMNS}
        w = r.get("what_if")
        if w is not None:
            w = {k: _json_value(v) for k, v in w.items()}
            w["throttles"] = w["throttles"] or 0
            w["first_throttle_utc"] = _utc(w["first_throttle_ms"])
        user["what_if"] = w
        users.append(user)
    doc = {
        "basis": None if basis is None else asdict(basis),
        "rules": {"suggested": SUGGESTED_RULE, "default": DEFAULT_RULE, "percentiles": PERCENTILE_METHOD},
        "default": None if default is None else asdict(default),
        "users": users,
        "applied": False,
    }
    return json.dumps(doc, indent=2, sort_keys=True)


def configs_script(
    suggestions: Mapping[str, int], default: int | None, redis_url_placeholder: str = ""
) -> str:
    """A POSIX sh script of ``pidquota configs --alter`` lines: the ``<default>`` first (if
    given), then each user of ``suggestions`` by name. Nothing is applied by writing it.

    It passes ``--redis "$REDIS"`` when ``REDIS`` is set and not empty (from the
    environment, else ``redis_url_placeholder``); otherwise ``pidquota configs`` uses
    ``pidquota.redis.url`` from pidquota's settings.
    """
    lines = [
        "#!/bin/sh",
        f"# pidquota recommend: suggested {QUOTA_KEY} quotas. Nothing has been applied.",
        "# Review the lines below (a user far above the <default> may be a misbehaving client",
        "# rather than one that needs more), then run:",
        "#   REDIS=redis://HOST:PORT/DB sh THIS-FILE   (pidquota configs --redis URL)",
        "# or, with REDIS unset or empty, pidquota configs uses pidquota.redis.url of its settings.",
        "set -eu",
        f'if [ -z "${{REDIS+set}}" ]; then REDIS={shlex.quote(redis_url_placeholder)}; fi',
        'if [ -n "$REDIS" ]; then set -- --redis "$REDIS"; else set --; fi',
    ]
    alter = 'pidquota configs "$@" --alter --entity-type users'
    if default is not None:
        lines.append(f"{alter} --entity-default --add-config {QUOTA_KEY}={_rate(default)}")
    for principal in sorted(suggestions):
        if principal == DEFAULT_ENTITY:
            raise ValueError(f"{DEFAULT_ENTITY} is given as default=, not as a user")
        rate = _rate(suggestions[principal])
        lines.append(f"{alter} --entity-name {shlex.quote(principal)} --add-config {QUOTA_KEY}={rate}")
    return "\n".join(lines) + "\n"


def _rate(rate: float) -> str:
    if not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"a quota must be a finite number > 0, got {rate!r}")
    return str(int(rate)) if float(rate).is_integer() else repr(float(rate))
