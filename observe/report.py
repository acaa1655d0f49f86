"""``pidquota report``: one self-contained HTML file from a run's output folder.

The numbers come from :mod:`pidquota.observe.report_data`; this module only draws them (matplotlib,
the ``report`` extra, on its Agg canvas: no display, no global pyplot state) and writes the
HTML, every plot a PNG inside it as a ``data:`` URI, so the file can be mailed or attached
to a ticket as it is.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import pandas as pd

from pidquota.conf.errors import PidquotaError
from pidquota.observe import report_data as rd
from pidquota.streaming.outputs.retention import REPORT_FILE

WIDTH_IN, HEIGHT_IN, DPI = 9.0, 3.5, 100  # 900 x 350 px
MAX_LINES = 8  # users with a line in a plot; the rest are counted in its title
MAX_ROWS = 20  # rows of the offenders and dead-letter tables
_LABEL_CHARS = 22
_MARKERS = "osD^vP*X"
_NUMBER = "{x:,.10g}"  # y tick labels: 0.5, 60, 12,000; no offset text ("1e6") by the title


class MissingDependencyError(PidquotaError, ImportError):
    """An optional dependency of a command is not installed; the message names the extra."""


def require_matplotlib():
    """matplotlib's ``Figure`` and Agg canvas, or a :class:`MissingDependencyError` naming the fix."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError(
            "pidquota report needs matplotlib, which is not installed: pip install 'pidquota[report]'"
        ) from None
    return Figure, FigureCanvasAgg


def _figure():
    """A new figure on the Agg canvas, ``WIDTH_IN`` x ``HEIGHT_IN``, with its axes."""
    Figure, FigureCanvasAgg = require_matplotlib()
    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    FigureCanvasAgg(fig)
    # The same axes box in every plot, legend to its right, so their time axes line up.
    fig.subplots_adjust(left=0.1, right=0.7, top=0.9, bottom=0.16)
    return fig, fig.add_subplot()


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _label(user: str) -> str:
    """A user's name in a legend, at most ``_LABEL_CHARS``: a long one keeps its start and its
    end (``User:CN=ser…O=example-2``), where names of one scheme differ most."""
    if len(user) <= _LABEL_CHARS:
        return user
    head = (_LABEL_CHARS - 1) // 2
    return user[:head] + "…" + user[-(_LABEL_CHARS - 1 - head) :]


def _time_axis(ax, span: tuple[pd.Timestamp, pd.Timestamp]) -> None:
    """Event time on x, as UTC dates and times, over the whole run."""
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(minticks=4, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    formatter = mdates.ConciseDateFormatter(locator, show_offset=True)
    formatter.offset_formats = ["", "%Y", "%Y-%m", "%Y-%m-%d", "%Y-%m-%d", "%Y-%m-%d %H:%M"]
    ax.xaxis.set_major_formatter(formatter)
    ax.set_xlim(*span)
    ax.set_xlabel("event time (UTC)")
    ax.grid(True, alpha=0.3)


def _legend(fig, ax, extra=(), title: str | None = None) -> None:
    handles, labels = ax.get_legend_handles_labels()
    for handle in extra:
        handles.append(handle)
        labels.append(handle.get_label())
    fig.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(0.71, 0.92),
        fontsize="small",
        frameon=False,
        title=title,
    )


def _by_user(series: pd.DataFrame, colors: dict):
    """``(user, rows)`` in the colours' order (the offenders table's), users without rows left out."""
    groups = dict(tuple(series.groupby("user", sort=False)))
    return [(user, groups[user]) for user in colors if user in groups]


def _title(ax, text: str, hidden: int) -> None:
    ax.set_title(
        text + (f" (+{hidden} more users not drawn)" if hidden else ""), fontsize="medium", loc="left"
    )


def _quota_text(quotas: pd.Series) -> str:
    """A user's quota in a legend: ``60``, ``60-100`` if it changed, ``none`` if unlimited."""
    q = quotas.dropna()
    if q.empty:
        return "none"
    lo, hi = _short(q.min()), _short(q.max())
    return lo if lo == hi else f"{lo}-{hi}"


def _short(x: float) -> str:
    """A number in few characters: ``0.5``, ``60``, ``9999``, ``25k``, ``1.5M``."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e4, "k")):
        if abs(x) >= scale:
            return f"{x / (scale if suffix != 'k' else 1e3):.3g}{suffix}"
    return f"{x:.4g}"


def _rate_top(series: pd.DataFrame) -> float:
    """The rate plot's top: above every rate, and above the quotas near them; a quota far
    above every rate (say 100000 among rates of 60) is cut off, its value is in the legend."""
    top = series["rate"].max()
    near = series.loc[series["quota"] <= 1.5 * top, "quota"]
    return 1.1 * max(top, near.max() if len(near) else 0, 1)


def plot_rates(series: pd.DataFrame, colors: dict, span, window: str, hidden: int) -> bytes:
    """Each user's new-PID rate (solid) against its quota (dashed, same colour). Each line
    has its own marker, at offsets of its own, so that users with equal rates stay visible."""
    from matplotlib.lines import Line2D

    fig, ax = _figure()
    for i, (user, rows) in enumerate(_by_user(series, colors)):
        step = max(1, len(rows) // 12)
        ax.plot(
            rows["time"],
            rows["rate"],
            color=colors[user],
            label=f"{_label(user)} ({_quota_text(rows['quota'])})",
            lw=1.5,
            marker=_MARKERS[i % len(_MARKERS)],
            markersize=4,
            markevery=(i * max(step // len(colors), 1) % step, step),
            zorder=10 - i,  # the most throttled on top
        )
        ax.plot(rows["time"], rows["quota"], color=colors[user], ls="--", lw=1)
    ax.set_ylabel(f"new PIDs {window}")
    ax.set_ylim(0, _rate_top(series))
    ax.yaxis.set_major_formatter(_NUMBER)
    _time_axis(ax, span)
    _title(ax, f"New-PID rate per user (solid) against its quota (dashed), {window}", hidden)
    _legend(fig, ax, [Line2D([], [], color="grey", ls="--", lw=1, label="quota")], title="user (quota)")
    return _png(fig)


def plot_throttles(bins: pd.DataFrame, colors: dict, span, hidden: int) -> bytes:
    """THROTTLE decisions per event-time bin, one line per throttled user."""
    fig, ax = _figure()
    width = rd.format_ms(bins.attrs["bin_ms"])
    edges = bins.index.append(pd.DatetimeIndex([bins.index[-1] + pd.Timedelta(bins.attrs["bin_ms"], "ms")]))
    for user in bins.columns:
        ax.stairs(bins[user].to_numpy(), edges.to_numpy(), color=colors[user], label=_label(user), lw=1.5)
    ax.set_ylabel(f"throttles per {width}")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(_NUMBER)
    _time_axis(ax, span)
    _title(ax, f"Throttles (THROTTLE decisions) per {width} of event time", hidden)
    _legend(fig, ax)
    return _png(fig)


def plot_tokens(peaks: pd.DataFrame, colors: dict, span, hidden: int) -> bytes:
    """The throttled users' token buckets: the most tokens in each bin."""
    fig, ax = _figure()
    width = rd.format_ms(peaks.attrs["bin_ms"])
    for i, user in enumerate(peaks.columns):
        ax.step(
            peaks.index,
            peaks[user],
            where="post",
            color=colors[user],
            label=_label(user),
            lw=1.2,
            zorder=10 - i,
        )
    ax.axhline(1, color="grey", ls=":", lw=1, label="1 token")
    # Linear below 1 token, where a throttled user's bucket stays, logarithmic above.
    ax.set_yscale("symlog", linthresh=1, linscale=0.8)
    ax.yaxis.set_major_formatter(_NUMBER)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("tokens (symlog scale)")
    _time_axis(ax, span)
    _title(ax, f"Tokens in the throttled users' buckets: the most in each {width}", hidden)
    _legend(fig, ax)
    return _png(fig)


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
    table = rd.acted_on(actions)
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
    reasons = rd.dead_letter_reasons(dead)
    if reasons.empty:
        return _note("No dead letters.")
    classes = rd.dead_letter_classes(reasons)
    by_class = _table(["reason class", "dead letters"], classes.values.tolist(), {1})
    shown = reasons.head(MAX_ROWS)
    by_reason = _table(["reason class", "reason", "dead letters"], shown.values.tolist(), {2})
    more = len(reasons) - len(shown)
    parts = by_class + "<p></p>" + by_reason + _note(f"{more} more reasons not shown" if more else None)
    files = rd.dead_letter_files(dead)
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
    first, width, count = rd.bins(h.start_ms, h.end_ms)
    span = (rd.utc(first), rd.utc(first + count * width))
    users, hidden = rd.plotted_users(run.metrics, table, MAX_LINES)
    throttled = table.loc[table["throttles"] > 0, "user"].tolist()
    colors = {u: f"C{i % 10}" for i, u in enumerate(dict.fromkeys([*users, *throttled[:MAX_LINES]]))}
    rates = rd.rate_series(run.metrics, users, run.decisions, h.window_ms, (h.start_ms, h.end_ms))
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
    bins = rd.throttle_bins(run.decisions, list(drawn), h.start_ms, h.end_ms)
    tokens = rd.token_peaks(run.decisions, run.metrics, list(drawn), h.start_ms, h.end_ms)
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
    path and the run's per-user summary (:class:`pidquota.observe.report_data.RunSummary`) as text."""
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
