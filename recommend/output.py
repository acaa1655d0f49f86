"""``pidquota recommend``'s output: the table, the JSON and the ``pidquota configs`` script, from
the statistics of :mod:`pidquota.recommend.stats` (or of the Spark job, which has the same
columns) and the :class:`pidquota.recommend.floods.Plan` made from them. Nothing here computes
a number that decides a quota."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import asdict

import numpy as np
import pandas as pd

from pidquota.quota.resolver import DEFAULT_ENTITY, QUOTA_KEY
from pidquota.recommend.floods import Plan, evidence
from pidquota.recommend.stats import PERCENTILE_METHOD, USAGE_COLUMNS, Basis

SUGGESTED_RULE = "suggested = max(1, ceil(p99 x headroom))"


DEFAULT_RULE = (
    "<default> = max(1, ceil(v_k)), v_1 <= ... <= v_n the max x headroom of the users that are not "
    "suspected floods, k = ceil(share x n)"
)
FLOOD_RULE = (
    "suspected flood: more than half of its judged PIDs lived under the short life, and max > "
    "flood factor x the fleet median (the median max of the users whose PIDs are not mostly short-lived)"
)
QUOTA_RULE = (
    "own quota: a suspected flood max(1, min(<default>, floor(max / 2))), throttled; any other user "
    "max(suggested, max) where above the <default>, never throttled"
)
WHAT_IF_KEYS = (
    "quota",
    "throttles",
    "throttled_pids",
    "new_pids",
    "first_throttle_ms",
    "longest_throttle_ms",
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


def _share(x) -> str:
    return "-" if x is None or pd.isna(x) else f"{x:.0%}"


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s" if ms % 1000 == 0 else f"{ms} ms"


def _rows(usage: pd.DataFrame, what_if: pd.DataFrame | None) -> list[dict]:
    """One dict per principal, busiest first, with the what-if columns when given."""
    rows = _order(usage).to_dict("records")
    if what_if is not None:
        extra = {r["principal"]: r for r in what_if.to_dict("records")}
        for r in rows:
            w = extra.get(r["principal"], {})
            r["what_if"] = {k: w.get(k) for k in WHAT_IF_KEYS}
    return rows


def _suggested(r: dict) -> str:
    """The table's suggestion: the user's own quota (FLOOD for a suspected flood), or <default>."""
    if r["flood"]:
        return f"{r['quota']} FLOOD"
    return "<default>" if pd.isna(r["quota"]) else str(r["quota"])


def _what_if_cells(w: dict) -> list[str]:
    quota, longest = w["quota"], w["longest_throttle_ms"]
    return [
        "unlimited" if quota is None else f"{quota:g}",
        str(w["throttles"] or 0),
        f"{w['throttled_pids'] or 0}/{w['new_pids'] or 0}",
        _utc(w["first_throttle_ms"]) or "-",
        "-" if longest is None or pd.isna(longest) else f"{int(longest) / 1000:.3f}",
    ]


def table(plan: Plan, basis: Basis | None = None, what_if: pd.DataFrame | None = None) -> str:
    """Aligned plain text: a row per principal (busiest first), then the rules, the
    suspected floods with their evidence, the default and the what-if's outcome."""
    header = ["principal", "p50/W", "p99/W", "max/W", "active PIDs", "short-lived", "1 request"]
    header += ["x median", "suggested"]
    if what_if is not None:
        header += ["quota", "throttles", "throttled/new PIDs", "first throttle (UTC)", "longest throttle (s)"]
    lines = [header]
    for r in _rows(plan.usage, what_if):
        cells = [r["principal"], _num(r["p50"]), _num(r["p99"]), str(r["max"]), str(r["active_pids"])]
        ratio = "-" if pd.isna(r["peak_ratio"]) else f"{r['peak_ratio']:.1f}x"
        cells += [_share(r["short_lived"]), _share(r["one_request"]), ratio, _suggested(r)]
        if what_if is not None:
            cells += _what_if_cells(r["what_if"])
        lines.append(cells)
    notes = [*_notes(plan, basis), *_what_if_notes(plan, what_if), "Nothing was applied."]
    return "\n".join([_align(lines), *notes])


def _align(lines: list[list[str]]) -> str:
    """The principal column left-aligned, the others right-aligned, two spaces apart."""
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]))]
    out = []
    for row in lines:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def _notes(plan: Plan, basis: Basis | None) -> list[str]:
    notes = [""]
    fleet = plan.fleet
    if basis is not None:
        notes.append(
            f"New PIDs per window W = {_seconds(basis.window_ms)}: p50 and p99 over windows starting every "
            f"{_seconds(basis.slide_ms)} ({PERCENTILE_METHOD} percentiles), max over every window."
        )
    life = _seconds(fleet.short_life_ms)
    median = "-" if fleet.median_peak is None else f"{fleet.median_peak:g}"
    notes.append(
        f"short-lived: the share of a user's PIDs that lived under {life} (of those first seen {life} or more "
        f"before the input's end and last seen {life} or more after its start); 1 request: the share seen in "
        f"one request; x median: max/W over the fleet median {median} (of the users whose PIDs are not "
        "mostly short-lived)."
    )
    if not fleet.judged and not plan.usage.empty:
        notes.append(
            f"No PID's life could be judged (the input must span more than 2 x {life}; see --short-life): "
            "no user is suspected of a flood."
        )
    notes += _flood_notes(plan)
    notes += _default_notes(plan, basis)
    return notes


def _flood_notes(plan: Plan) -> list[str]:
    fleet = plan.fleet
    rule = (
        f"Suspected flood: more than half of its PIDs short-lived and max/W over {fleet.flood_factor:g} x the "
        "fleet median. It gets no raise: min(<default>, floor(max/W / 2)), under which it is throttled."
    )
    floods = plan.floods()
    if floods.empty:
        return [rule, "No user is a suspected flood."]
    lines = [rule, f"Suspected floods ({len(floods)}):"]
    for r in _order(floods).to_dict("records"):
        lines.append(f"  {r['principal']}: {evidence(r, fleet)}; quota {r['quota']}")
    return lines


def _default_notes(plan: Plan, basis: Basis | None) -> list[str]:
    default = plan.default
    if default is None:
        return []
    headroom = "" if basis is None else f", headroom {basis.headroom:g}"
    own = int(plan.usage["quota"].notna().sum()) - default.floods
    return [
        f"Suggested <default>: {default.rate} ({DEFAULT_RULE}, share {default.share:g}{headroom}), from the "
        f"{default.users} users that are not suspected floods; {default.covered} of them have max/W <= "
        f"{default.rate} and would never have been throttled by it.",
        f"{own} of them get a quota of their own, max(ceil(p99 x headroom), max/W): at least its max/W, so "
        "it would never have throttled them (recommend/rules.py).",
    ]


def _what_if_notes(plan: Plan, what_if: pd.DataFrame | None) -> list[str]:
    if what_if is None:
        return []
    hit = set(what_if.loc[what_if["throttles"] > 0, "principal"])
    floods = set(plan.floods()["principal"])
    return [
        "What-if (the enforcer itself, on the same input): throttles counts THROTTLE decisions (a throttled "
        "PID retries); throttled/new PIDs: the distinct PIDs throttled, of the new PIDs it judged.",
        f"It throttles {len(hit & floods)} of {len(floods)} suspected floods and {len(hit - floods)} other "
        f"users{': ' + ', '.join(sorted(hit - floods)) if hit - floods else ''}.",
    ]


def _json_value(v):
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return None if math.isnan(v) else float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def to_json(plan: Plan, basis: Basis | None = None, what_if: pd.DataFrame | None = None) -> str:
    """One JSON document: ``basis``, ``rules``, ``default`` (or null), ``fleet``, ``floods``
    (each suspected flood's principal, quota and evidence) and ``users`` (busiest first),
    each user with every :data:`USAGE_COLUMNS` key and ``what_if`` (null without a
    what-if; else the :data:`WHAT_IF_KEYS` and first_throttle_utc)."""
    users = []
    for r in _rows(plan.usage, what_if):
        user = {k: _json_value(r[k]) for k in USAGE_COLUMNS}
        w = r.get("what_if")
        if w is not None:
            w = {k: _json_value(v) for k, v in w.items()}
            for k in ("throttles", "throttled_pids", "new_pids"):
                w[k] = w[k] or 0
            w["first_throttle_utc"] = _utc(w["first_throttle_ms"])
        user["what_if"] = w
        users.append(user)
    floods = [
        {"principal": r["principal"], "quota": int(r["quota"]), "evidence": evidence(r, plan.fleet)}
        for r in _order(plan.floods()).to_dict("records")
    ]
    rules = {"suggested": SUGGESTED_RULE, "default": DEFAULT_RULE, "percentiles": PERCENTILE_METHOD}
    rules.update(flood=FLOOD_RULE, quota=QUOTA_RULE)
    doc = {
        "basis": None if basis is None else asdict(basis),
        "rules": rules,
        "default": None if plan.default is None else asdict(plan.default),
        "fleet": asdict(plan.fleet),
        "floods": floods,
        "users": users,
        "applied": False,
    }
    return json.dumps(doc, indent=2, sort_keys=True)


def configs_script(
    suggestions: Mapping[str, int],
    default: int | None,
    redis_url_placeholder: str = "",
    comments: Mapping[str, str] | None = None,
) -> str:
    """A POSIX sh script of ``pidquota configs --alter`` lines: the ``<default>`` first (if
    given), then each user of ``suggestions`` by name, after its line of ``comments`` if
    it has one (control characters shown as ``?``). Nothing is applied by writing it.

    It passes ``--redis "$REDIS"`` when ``REDIS`` is set and not empty (from the
    environment, else ``redis_url_placeholder``); otherwise ``pidquota configs`` uses
    ``pidquota.redis.url`` from pidquota's settings.
    """
    lines = [
        "#!/bin/sh",
        f"# pidquota recommend: suggested {QUOTA_KEY} quotas. Nothing has been applied.",
        "# Review the lines below (a suspected flood, named in a comment, is held at or under the",
        "# <default>; every other user's quota is at or above its peak), then run:",
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
        if comments and principal in comments:
            lines.append(_comment(f"{principal}: {comments[principal]}"))
        lines.append(f"{alter} --entity-name {shlex.quote(principal)} --add-config {QUOTA_KEY}={rate}")
    return "\n".join(lines) + "\n"


def _comment(text: str) -> str:
    """``text`` as one sh comment line: a line break or other control character in a
    principal's name must not end the comment."""
    return "# " + "".join("?" if ord(c) < 32 or ord(c) == 127 else c for c in text)


def plan_script(plan: Plan, redis_url_placeholder: str = "") -> str:
    """:func:`configs_script` of a plan: the <default>, each user with a quota of its own,
    and each suspected flood after a comment with its evidence."""
    quotas = plan.quotas()
    default = quotas.pop(DEFAULT_ENTITY, None)
    comments = {
        r["principal"]: f"suspected flood, held at {r['quota']} (no raise): {evidence(r, plan.fleet)}"
        for r in plan.floods().to_dict("records")
    }
    return configs_script(quotas, default, redis_url_placeholder, comments)


def _rate(rate: float) -> str:
    if not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"a quota must be a finite number > 0, got {rate!r}")
    return str(int(rate)) if float(rate).is_integer() else repr(float(rate))
