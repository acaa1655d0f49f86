"""The report's plots: matplotlib (the ``report`` extra) on its Agg canvas, no display and no
global pyplot state; each plot a PNG."""

from __future__ import annotations

import io

import pandas as pd

import pidquota.observe.report.data as rd
from pidquota.conf.errors import PidquotaError

WIDTH_IN, HEIGHT_IN, DPI = 9.0, 3.5, 100  # 900 x 350 px
MAX_LINES = 8  # users with a line in a plot; the rest are counted in its title
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
