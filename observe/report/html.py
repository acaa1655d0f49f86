"""``pidquota report``'s page: one self-contained HTML file from a run's output folder.

The numbers come from :mod:`pidquota.observe.report.data` and :mod:`.series`, the plots from
:mod:`.plots`; this module writes the HTML, every plot a PNG inside it as a ``data:`` URI, so
the file can be mailed or attached to a ticket as it is.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

import pidquota.observe.report.data as rd
import pidquota.observe.report.series as rs
from pidquota.conf.errors import PidquotaError
from pidquota.observe.report.plots import (
    DPI,
    HEIGHT_IN,
    MAX_LINES,
    WIDTH_IN,
    plot_rates,
    plot_throttles,
    plot_tokens,
    require_matplotlib,
)
from pidquota.streaming.outputs.retention import REPORT_FILE

MAX_ROWS = 20  # rows of the offenders and dead-letter tables

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 960px; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { padding: 0.2em 0.8em; border-bottom: 1px solid #ddd; text-align: left; overflow-wrap: anywhere; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
img { display: block; max-width: 100%; height: auto; }
p.note { color: #555; font-size: 0.9em; }
"""


def _table(headers: list[str] | None, rows: list[list], numeric: set[int] = frozenset()) -> str:
    """An HTML table (no header row for ``headers=None``); the columns in ``numeric``
    right-aligned. Every cell is escaped."""

    def cells(tag: str, values) -> str:
        return "".join(
            f"<{tag}{' class=n' if i in numeric else ''}>{html.escape(str(v))}</{tag}>"
            for i, v in enumerate(values)
        )

    body = "".join(f"<tr>{cells('td', r)}</tr>" for r in rows)
    head = "" if headers is None else f"<tr>{cells('th', headers)}</tr>"
    return f"<table>{head}{body}</table>"


def _note(text: str | None) -> str:
    return f'<p class="note">{html.escape(text)}</p>' if text else ""


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" width="{int(WIDTH_IN * DPI)}" height="{int(HEIGHT_IN * DPI)}" src="data:image/png;base64,{data}">'


def window_text(window_ms: int | None) -> str:
    """How the rate's unit reads: ``per 1 h``, or ``per window`` when W is not known."""
    return "per window" if window_ms is None else f"per {rd.format_ms(window_ms)}"


def header_html(h: rd.Header) -> str:
    span = "-"
    if h.start_ms is not None:
        span = f"{rd.format_time(h.start_ms)} to {rd.format_time(h.end_ms)} ({rd.format_ms(h.end_ms - h.start_ms)})"
    window = (
        "not derivable (no throttles); rates are per window W"
        if h.window_ms is None
        else rd.format_ms(h.window_ms)
    )
    rows = [
        ["folder", str(h.folder)],
        ["event time", span],
        ["batches with output", f"{h.batches:,}"],
        ["events", f"{h.events:,}"],
        ["decisions", f"{h.decisions:,}"],
        ["metric rows", f"{h.metric_rows:,}"],
        ["dead letters", f"{h.dead_letters:,}"],
        ["quota window W", window],
    ]
    if h.modes:
        rows.append(
            [
                "mode",
                ", ".join(h.modes) + (" (throttles computed, not published)" if "shadow" in h.modes else ""),
            ]
        )
    if h.replayed_decisions:
        rows.append(
            ["replayed decisions", f"{h.replayed_decisions:,} (before --replay-until; not counted below)"]
        )
    return _table(None, rows)


def offenders_html(table: pd.DataFrame) -> str:
    """The throttled users (at most MAX_ROWS), then one line for everyone else."""
    top = table[table["throttles"] > 0].head(MAX_ROWS)
    named = bool(top["client"].any()) if "client" in top else False
    rows = [
        [
            r.user,
            f"{r.new_pids:,}",
            f"{r.throttles:,}",
            rd.format_ms(r.longest_throttle_ms),
            rd.format_time(r.first_throttle_ms),
            rd.format_time(r.last_throttle_ms),
            *([r.client or "-"] if named else []),
        ]
        for r in top.itertuples()
    ]
    headers = [
        "user",
        "distinct new PIDs",
        "throttles",
        "longest throttle",
        "first throttle",
        "last throttle",
        *(["client (the most throttled)"] if named else []),
    ]
    parts = [_table(headers, rows, {1, 2, 3}) if rows else _note("No user was throttled.")]
    return "".join(parts) + _note(rd.others_line(table, len(top)))


def acted_on_html(actions: pd.DataFrame) -> str:
    """The principals the actuator acted on (``OUTPUT/actions``); empty when it did not run."""
    table = rs.acted_on(actions)
    if table.empty:
        return ""
    rows = [
        [
            r.principal + (" (dry run)" if r.dry_run else ""),
            r.controls,
            rd.format_time(r.applied_ms),
            "still held" if r.held else rd.format_time(r.undone_ms),
            f"{r.failed:,}",
        ]
        for r in table.head(MAX_ROWS).itertuples()
    ]
    headers = ["principal", "Kafka controls", "first applied", "undone", "failed tries"]
    return (
        "<h2>Acted on</h2>"
        + _table(headers, rows, {4})
        + _note("The actuator's actions (wall clock), every one in OUTPUT/actions/: docs/enforcing.md.")
    )


def dead_letters_html(dead: pd.DataFrame) -> str:
    """Dead letters by reason class, then by reason text (at most MAX_ROWS)."""
    reasons = rs.dead_letter_reasons(dead)
    if reasons.empty:
        return _note("No dead letters.")
    classes = rs.dead_letter_classes(reasons)
    by_class = _table(["reason class", "dead letters"], classes.values.tolist(), {1})
    shown = reasons.head(MAX_ROWS)
    by_reason = _table(["reason class", "reason", "dead letters"], shown.values.tolist(), {2})
    more = len(reasons) - len(shown)
    parts = by_class + "<p></p>" + by_reason + _note(f"{more} more reasons not shown" if more else None)
    files = rs.dead_letter_files(dead)
    if len(files):
        top = files.head(MAX_ROWS)
        parts += "<p></p>" + _table(["input file", "dead letters"], top.values.tolist(), {1})
        rest = len(files) - len(top)
        parts += _note(f"{rest} more files not shown" if rest else None)
    return parts


def plots_html(run: rd.Run, table: pd.DataFrame, h: rd.Header) -> str:
    """The three plots over the run's event time, each with its heading. A user keeps its
    colour in all three; the x axes span the same whole bins (the throttle plot's)."""
    if h.start_ms is None:
        return _note("No decisions or metrics: nothing to plot.")
    first, width, count = rs.bins(h.start_ms, h.end_ms)
    span = (rd.utc(first), rd.utc(first + count * width))
    users, hidden = rs.plotted_users(run.metrics, table, MAX_LINES)
    throttled = table.loc[table["throttles"] > 0, "user"].tolist()
    colors = {u: f"C{i % 10}" for i, u in enumerate(dict.fromkeys([*users, *throttled[:MAX_LINES]]))}
    rates = rs.rate_series(run.metrics, users, run.decisions, h.window_ms, (h.start_ms, h.end_ms))
    parts = ["<h2>New-PID rate against the quota</h2>"]
    if len(rates):
        window = window_text(h.window_ms)
        parts.append(_img(plot_rates(rates, colors, span, window, hidden), "new-PID rate per user"))
        parts.append(
            _note(
                "rate: new PIDs admitted in the last window W, at the end of each bin of event time "
                "(from the ADMIT decisions; a user without decisions: its metrics rows' rate at each "
                "batch's end); quota: the user's producer_ids_rate."
            )
        )
    else:
        parts.append(_note("No user has a rate (no metrics rows with one)."))
    return "".join(parts) + _throttle_plots(run, throttled, colors, span, h)


def _throttle_plots(run: rd.Run, throttled: list[str], colors: dict, span, h: rd.Header) -> str:
    """Throttles and tokens over event time, for the most throttled users."""
    if not throttled:
        return "<h2>Throttles over time</h2>" + _note("No user was throttled.")
    drawn = {u: colors[u] for u in throttled[:MAX_LINES]}
    more = max(0, len(throttled) - MAX_LINES)
    bins = rs.throttle_bins(run.decisions, list(drawn), h.start_ms, h.end_ms)
    tokens = rs.token_peaks(run.decisions, run.metrics, list(drawn), h.start_ms, h.end_ms)
    return (
        "<h2>Throttles over time</h2>"
        + _img(plot_throttles(bins, drawn, span, more), "throttles per user over event time")
        + "<h2>Tokens of the throttled users</h2>"
        + _img(plot_tokens(tokens, drawn, span, more), "tokens of the throttled users")
        + _note(
            "From the decision and metrics rows. A bucket that never gets past 1 token spends each "
            "token as it comes back: every new PID of that user waits."
        )
    )


def render(run: rd.Run) -> str:
    """The whole report as one HTML page."""
    h = rd.header(run)
    table = rd.offenders(run.decisions, run.metrics)
    title = f"pidquota report: {h.folder}"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_CSS}</style></head><body><h1>pidquota report</h1>"
        f"{header_html(h)}{plots_html(run, table, h)}"
        f"<h2>Top offenders</h2>{offenders_html(table)}{acted_on_html(run.actions)}"
        f"<h2>Dead letters</h2>{dead_letters_html(run.dead)}</body></html>\n"
    )


def write_report(out: str | Path, html_path: str | Path | None = None) -> tuple[Path, str]:
    """Write the report of the run in ``out`` (to ``out/report.html`` by default); return its
    path and the run's per-user summary (:class:`pidquota.observe.report.data.RunSummary`) as text."""
    require_matplotlib()  # before reading a big folder
    run = rd.load_run(out)
    path = Path(html_path) if html_path is not None else Path(out, REPORT_FILE)
    try:
        path.write_text(render(run), encoding="utf-8")
    except OSError as exc:
        raise PidquotaError(f"cannot write the report to {path}: {exc.strerror or exc}") from None
    summary = rd.RunSummary()
    summary.add({"decisions": run.decisions, "metrics": run.metrics, "dead-letters": run.dead})
    return path, summary.render()
