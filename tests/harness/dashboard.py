"""The Grafana dashboard's PromQL, as a test can run it: every panel's expressions with
Grafana's variables replaced by values Prometheus accepts, and the metric names each uses.

No Spark, no Grafana: the dashboard is read as JSON. ``panel_queries`` refuses a variable
it does not know, so a panel that needs one more than ``$user``, ``$__range``,
``$__rate_interval`` and ``$__interval`` fails here instead of in a browser.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docker" / "grafana" / "dashboards" / "pidquota.json"

# The exporter's metrics (observe/exporter.py); test_grafana checks this list against it.
PER_USER_METRICS = (
    "pidquota_producer_ids_rate",
    "pidquota_producer_ids_tokens",
    "pidquota_producer_ids_throttle_time_ms",
    "pidquota_producer_ids_quota",
    "pidquota_producer_ids_admitted_total",
    "pidquota_producer_ids_throttled_total",
    "pidquota_producer_ids_throttling",
    "pidquota_active_pids_estimate",
    "pidquota_state_bytes",
)
QUERY_METRICS = (
    "pidquota_input_events_total",
    "pidquota_input_events_per_second",
    "pidquota_batch_duration_seconds",
    "pidquota_last_batch_id",
    "pidquota_event_time_lag_seconds",
    "pidquota_dead_letters_total",
    "pidquota_input_skipped_total",
    "pidquota_quota_stale",
    "pidquota_failed_publishes_total",
    "pidquota_prometheus_users",
    "pidquota_shadow",
    "pidquota_actuator_actions_total",
    "pidquota_actuator_principals",
)
METRIC_NAMES = PER_USER_METRICS + QUERY_METRICS

# $name, ${name}, ${name:format} and Grafana's old [[name]].
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)(?::\w+)?\]\]")


def load(path: str | Path = DASHBOARD) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def panels(dashboard: dict) -> Iterator[dict]:
    """Every panel, rows' nested panels included; rows themselves are left out."""
    for panel in dashboard.get("panels") or []:
        if panel.get("type") == "row":
            yield from panels(panel)
        else:
            yield panel


def substitute(expr: str, values: dict[str, str]) -> str:
    """``expr`` with each variable replaced; an unknown one raises ValueError naming it."""

    def value(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        if name not in values:
            raise ValueError(f"{expr!r} uses ${name}; only {', '.join('$' + v for v in values)} are known")
        return values[name]

    return _VARIABLE.sub(value, expr)


def dashboard_queries(
    dashboard: dict,
    *,
    user: str = ".+",
    range_: str = "5m",
    rate_interval: str = "1m",
    interval: str = "15s",
) -> list[tuple[str, str]]:
    """(panel title, expr) for every target of every panel, variables substituted.

    ``user`` is a regex, as Grafana passes a multi-value variable to ``=~`` (``.+`` is the
    dashboard's All); the others are Prometheus durations."""
    values = {"user": user, "__range": range_, "__rate_interval": rate_interval, "__interval": interval}
    return [
        (panel.get("title", ""), substitute(target["expr"], values))
        for panel in panels(dashboard)
        for target in panel.get("targets") or []
        if target.get("expr")
    ]


def panel_queries(path: str | Path = DASHBOARD, **values: str) -> list[tuple[str, str]]:
    """:func:`dashboard_queries` of the dashboard file at ``path``."""
    return dashboard_queries(load(path), **values)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_NAME = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {"and", "or", "unless", "atan2", "bool", "offset", "inf", "nan", "group_left", "group_right"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left of it once strings, label
    matchers, ranges, label lists (``by (user)``), function calls, numbers, durations and
    keywords are taken out. ``sum by (user) (rate(m{user=~"a"}[1m])) > bool 0`` -> {"m"}."""
    text = _STRING.sub('""', expr)
    for pattern in (_MATCHERS, _RANGE, _LABEL_LIST):
        text = pattern.sub(" ", text)
    return {name for name in _NAME.findall(text) if name.lower() not in _KEYWORDS}
