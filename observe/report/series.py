"""The report's series: what its plots and tables draw (rates, throttles and tokens over
event time, dead letters by reason and file, the actuator's actions). pandas only."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pidquota.observe.report.data import live, utc
from pidquota.quota import ADMIT, THROTTLE
from pidquota.streaming.reasons import reason_class

# Bin widths for counts over event time, smallest first: the first that gives at most
# MAX_BINS bins over the run's span is used.
_BIN_MS = tuple(
    s * 1000 for s in (1, 5, 10, 30, 60, 300, 600, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400)
)
MAX_BINS = 60
TOKEN_BINS = 300


def plotted_users(metrics: pd.DataFrame, table: pd.DataFrame, limit: int = 8) -> tuple[list[str], int]:
    """The users worth a line, at most ``limit``, and how many more have a rate: the most
    throttled first (the offenders table's order), then by peak ``rate / quota``."""
    m = live(metrics)
    if m.empty or "rate" not in m:
        return [], 0
    m = m[m["rate"].notna()]
    peak = (m["rate"] / m["quota"].where(m["quota"] > 0)).groupby(m["principal"]).max()
    ranked = pd.DataFrame({"user": peak.index, "peak": peak.fillna(0).to_numpy()})
    ranked = ranked.merge(table[["user", "throttles"]], on="user", how="left").fillna({"throttles": 0})
    ranked = ranked.sort_values(["throttles", "peak", "user"], ascending=[False, False, True])
    users = ranked["user"].tolist()
    return users[:limit], max(0, len(users) - limit)


def rate_series(
    metrics: pd.DataFrame,
    users: list[str],
    decisions: pd.DataFrame | None = None,
    window_ms: int | None = None,
    span_ms: tuple[int, int] | None = None,
) -> pd.DataFrame:
    """``user, time, rate, quota`` (rate and quota in new PIDs per W).

    With the decisions, the window and the run's event-time span, a user with decisions is
    drawn from them: at the end ``e`` of each bin (:func:`bins`), its ADMIT decisions in
    ``[e - W, e)``, and the quota of its latest decision. So a run of one batch, one metrics
    row per user, still gets a line. Example: W = 60 s, ADMITs at 0, 10 and 70 s, bins of
    10 s: 1 at e = 10 s, 2 at 20 to 60 s, 1 at 70 s (the one at 10 s) and at 80 s (the one
    at 70 s). Users without decisions take their metrics rows' ``rate`` (the SampledStat's)
    at each batch."""
    m = live(metrics)
    drawn = _rates_from_decisions(live(decisions), users, window_ms, span_ms)
    rest = [u for u in users if u not in set(drawn["user"])]
    if not (m.empty or not rest or "rate" not in m):
        m = m[m["principal"].isin(rest) & m["rate"].notna()].sort_values("timestamp")
        from_metrics = pd.DataFrame(
            {"user": m["principal"], "time": utc(m["timestamp"]), "rate": m["rate"], "quota": m["quota"]}
        )
        drawn = pd.concat([drawn, from_metrics], ignore_index=True) if len(drawn) else from_metrics
    return drawn.reset_index(drop=True)


def _rates_from_decisions(decisions, users, window_ms, span_ms) -> pd.DataFrame:
    empty = pd.DataFrame(columns=["user", "time", "rate", "quota"])
    if decisions is None or decisions.empty or not window_ms or span_ms is None or "verdict" not in decisions:
        return empty
    first, width, count = bins(*span_ms)
    ends = np.array([first + (k + 1) * width for k in range(count)], dtype=np.int64)
    ends[-1] = min(ends[-1], span_ms[1] + 1)  # the last bin ends with the run
    parts = []
    for user, rows in decisions[decisions["principal"].isin(users)].groupby("principal", sort=False):
        rows = rows.sort_values("timestamp", kind="stable")
        ts = rows["timestamp"].to_numpy(np.int64)
        admitted = np.sort(ts[(rows["verdict"] == ADMIT).to_numpy()])
        rate = np.searchsorted(admitted, ends, "left") - np.searchsorted(admitted, ends - window_ms, "left")
        latest = np.searchsorted(ts, ends, "left") - 1  # the last decision before each bin's end
        quota = rows["quota"].to_numpy(np.float64)[np.maximum(latest, 0)]
        shown = latest >= 0
        parts.append(
            pd.DataFrame(
                {
                    "user": user,
                    "time": utc(pd.Series(ends[shown])),
                    "rate": rate[shown],
                    "quota": quota[shown],
                }
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else empty


def bin_ms(span_ms: int, max_bins: int = MAX_BINS) -> int:
    """The smallest of the round bin widths that cuts ``span_ms`` into at most ``max_bins`` bins."""
    return next((b for b in _BIN_MS if span_ms / b <= max_bins), _BIN_MS[-1])


def bins(start_ms: int, end_ms: int, max_bins: int = MAX_BINS) -> tuple[int, int, int]:
    """``(first, width, count)``: bins of a round width (:func:`bin_ms`) that cover event time
    ``start_ms`` to ``end_ms``, from the width's multiple at or before ``start_ms``. Example:
    00:03 to 02:59 takes 5 min bins (175 min / 60 is 2.9 min; 1 min would make 175 bins), 36
    of them from 00:00 to 03:00."""
    width = bin_ms(max(end_ms - start_ms, 1), max_bins)
    first = start_ms // width * width
    return first, width, (end_ms - first) // width + 1


def throttle_bins(decisions: pd.DataFrame, users: list[str], start_ms: int, end_ms: int) -> pd.DataFrame:
    """THROTTLE decisions per event-time bin (:func:`bins`): one column per user, one row per
    bin start, empty bins included. The width, in ms, is in ``.attrs["bin_ms"]``."""
    first, width, count = bins(start_ms, end_ms)
    d = live(decisions)
    t = d[(d["verdict"] == THROTTLE) & d["principal"].isin(users)] if len(d) else d
    counts = pd.DataFrame(0, index=utc(pd.Series([first + k * width for k in range(count)])), columns=users)
    if len(t):
        at = utc((t["timestamp"] - first) // width * width + first)
        grouped = t.groupby([at.to_numpy(), t["principal"].to_numpy()]).size().unstack(fill_value=0)
        counts = counts.add(grouped.reindex(index=counts.index, columns=users, fill_value=0), fill_value=0)
    counts.attrs["bin_ms"] = width
    return counts.astype("int64")


def token_peaks(
    decisions: pd.DataFrame, metrics: pd.DataFrame, users: list[str], start_ms: int, end_ms: int
) -> pd.DataFrame:
    """The most tokens each user's bucket held in each event-time bin (:func:`bins`, at most
    TOKEN_BINS), as known from its rows (after each verdict, and at each batch's end): one
    column per user, NaN for a bin without rows. Below 1 all bin long, every new PID of the
    user waited. The width, in ms, is in ``.attrs["bin_ms"]``."""
    first, width, count = bins(start_ms, end_ms, TOKEN_BINS)
    index = utc(pd.Series([first + k * width for k in range(count)]))
    peaks = pd.DataFrame(float("nan"), index=index, columns=users)
    for frame in (live(decisions), live(metrics)):
        if not len(frame) or "tokens" not in frame:
            continue
        rows = frame[frame["principal"].isin(users) & frame["tokens"].notna()]
        at = utc((rows["timestamp"] - first) // width * width + first)
        most = rows["tokens"].astype("float64").groupby([at.to_numpy(), rows["principal"].to_numpy()]).max()
        peaks = peaks.combine(most.unstack().reindex(index=index, columns=users), _fmax)
    peaks.attrs["bin_ms"] = width
    return peaks


def _fmax(a: pd.Series, b: pd.Series) -> pd.Series:
    return pd.concat([a, b], axis=1).max(axis=1)


def dead_letter_reasons(dead: pd.DataFrame) -> pd.DataFrame:
    """``class, reason, count``: each reason text with its class (:func:`pidquota.streaming.reasons.reason_class`),
    the biggest class first, and within it the most frequent reason."""
    if dead.empty or "reason" not in dead:
        return pd.DataFrame(columns=["class", "reason", "count"])
    counts = dead["reason"].fillna("").value_counts().rename_axis("reason").reset_index(name="count")
    counts.insert(0, "class", counts["reason"].map(reason_class))
    counts["class_total"] = counts.groupby("class")["count"].transform("sum")
    counts = counts.sort_values(
        ["class_total", "class", "count", "reason"], ascending=[False, True, False, True]
    )
    return counts.drop(columns="class_total").reset_index(drop=True)


def local_file(source: str) -> str:
    """A dead letter's file as the user wrote it: without Spark's ``file:`` scheme."""
    return source.removeprefix("file://").removeprefix("file:")


def dead_letter_files(dead: pd.DataFrame) -> pd.DataFrame:
    """``file, count``: the dead letters of each input file, the most first (none for a Kafka
    input, whose ``source`` is ``topic/partition@offset``)."""
    if dead.empty or "source" not in dead:
        return pd.DataFrame(columns=["file", "count"])
    files = dead["source"].dropna().astype(str)
    files = files[~files.str.contains("@", regex=False)].map(local_file)
    counts = files.value_counts().rename_axis("file").reset_index(name="count")
    return counts.sort_values(["count", "file"], ascending=[False, True]).reset_index(drop=True)


def dead_letter_classes(reasons: pd.DataFrame) -> pd.DataFrame:
    """``class, count`` from :func:`dead_letter_reasons`' table, the biggest first."""
    totals = reasons.groupby("class", sort=False)["count"].sum()
    return totals.rename_axis("class").reset_index(name="count")


def acted_on(actions: pd.DataFrame) -> pd.DataFrame:
    """Per principal the actuator acted on: its controls, when first applied and last undone
    (wall clock), whether one is still held, failures, and whether it was a dry run.

    Worked example: rows apply (t=1 s), keep, undo (t=9 s) for ``User:crash`` give one row
    ``User:crash, quota user=crash request_percentage, applied 1 s, undone 9 s, held False``."""
    columns = ["principal", "controls", "applied_ms", "undone_ms", "held", "failed", "dry_run"]
    if actions.empty or "action" not in actions:
        return pd.DataFrame(columns=columns)
    rows = []
    for principal, rows_of in actions.groupby("principal", sort=True):
        applied = rows_of[rows_of.action == "apply"]
        ended = rows_of[rows_of.action.isin(["undo", "left"])]
        if applied.empty and ended.empty and not (rows_of.action == "failed").any():
            continue  # only skipped (the allow-list, the cap) or kept
        last_apply = applied.at_ms.max() if len(applied) else None
        last_end = ended.at_ms.max() if len(ended) else None
        rows.append(
            [
                principal,
                ", ".join(sorted(set(applied.control) | set(ended.control))),
                applied.at_ms.min() if len(applied) else None,
                last_end,
                last_apply is not None and (last_end is None or last_end < last_apply),
                int((rows_of.action == "failed").sum()),
                any(str(v) == "True" for v in rows_of.get("dry_run", [])),  # bools, or NaN where absent
            ]
        )
    return pd.DataFrame(rows, columns=columns)
