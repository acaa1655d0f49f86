"""``pidquota recommend``: the reference computation. Spark-free (pandas).

The Spark job (``recommend/job.py``) computes the same numbers at
scale; the functions here define them on a pandas frame of events
(``recommend/output.py`` renders whatever either one computed).

Per principal, with W the window (``producer.id.quota.window.size.seconds``):

1. :func:`new_sightings`: the sightings of a PID that the enforcer would count
   as new (at least as many as it would).
2. :func:`window_counts`: new sightings per window ``[start, start + W)``,
   starts every ``slide`` ms (W / ``layer.count`` by default).
3. :func:`peaks`: the most new sightings in *any* window ``[s, s + W)``:
   the number that decides throttling (:mod:`pidquota.recommend.rules`).
4. :func:`window_stats` and :func:`with_suggestions`: p50 and p99 of the
   window counts, the peak as ``max``, active PIDs, the suggested quota.
5. :func:`pid_lives`: how long its PIDs live, the evidence that tells a flood
   from growth (:mod:`pidquota.recommend.floods` classifies and sets the quotas).

Worked example, W = 60 s, slide 15 s, one principal with PID 1 at 0 s and
70 s, PID 2 at 10 s and 20 s: new sightings are PID 1 at 0 s, PID 2 at 10 s
and PID 1 at 70 s (a gap over W). Windows start at -45, -30, ..., 60 s and
hold 2, 2, 2, 2, 1, 1, 1, 1 new sightings; p50 = 1.5, the peak is 2 (the
window from 0 s), active PIDs 2, and with headroom 2 the suggestion is
``ceil(p99 x 2)`` = ``ceil(2 x 2)`` = 4.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pidquota.quota.enforcer import THROTTLE
from pidquota.quota.resolver import resolve
from pidquota.recommend.rules import (
    DEFAULT_FLOOD_FACTOR,
    DEFAULT_SHORT_LIFE_S,
    covered,
    suggest_default,
    suggest_rate,
)

NEW_COLUMNS = ("principal", "producer_id", "timestamp")
COUNT_COLUMNS = ("principal", "window_start", "new_pids")
PEAK_COLUMNS = ("principal", "peak")
ACTIVE_COLUMNS = ("principal", "active_pids")
LIFE_COLUMNS = ("principal", "judged_pids", "short_lived_pids", "one_request_pids")
WINDOW_COLUMNS = ("principal", "p50", "p99", "max", "active_pids")
# What the Spark job returns as its first frame, and :func:`reference_stats` computes.
STATS_COLUMNS = (*WINDOW_COLUMNS, *LIFE_COLUMNS[1:])
# With the suggestions, and the classification of :mod:`pidquota.recommend.floods`.
USAGE_COLUMNS = (
    *STATS_COLUMNS,
    "suggested",
    "fits",
    "short_lived",
    "one_request",
    "peak_ratio",
    "flood",
    "quota",
)
# What the Spark job returns as its second frame, and :func:`what_if_summary` computes.
WHAT_IF_COLUMNS = (
    "principal",
    "throttles",
    "throttled_pids",
    "new_pids",
    "first_throttle_ms",
    "longest_throttle_ms",
)
DEFAULT_SHORT_LIFE_MS = DEFAULT_SHORT_LIFE_S * 1000
PERCENTILE_METHOD = "linear"  # numpy's default: interpolate between the two nearest ranks


def default_slide_ms(window_ms: int, layer_count: int) -> int:
    """The windows' step: W / ``layer.count`` (the enforcer's layer span), at least 1 ms."""
    return max(1, window_ms // layer_count)


def new_sightings(events: pd.DataFrame, window_ms: int) -> pd.DataFrame:
    """The sightings that count as new PIDs: principal, producer_id, timestamp.

    A sighting of PID p by principal u is *new* when it is the first of (u, p),
    or the previous sighting of (u, p) is more than ``window_ms`` earlier.
    PIDs < 0 are not idempotent and never count; repeated (u, p, timestamp)
    rows are one sighting.

    The enforcer remembers a PID from W to W + W / ``layer.count`` after its
    last sighting (and a Bloom false positive remembers one it never saw), so
    ``W`` is the lower bound: this counts at least as many new PIDs as the
    enforcer would, and errs towards higher suggestions. (A throttled PID is
    not remembered, so its retries are new to a throttling enforcer; under a
    quota that never throttles, the enforcer's new PIDs are a subset of these.)
    """
    ev = events.loc[events["producer_id"] >= 0, list(NEW_COLUMNS)]
    ev = ev.drop_duplicates().sort_values(["principal", "producer_id", "timestamp"], kind="stable")
    same = (ev["principal"] == ev["principal"].shift()) & (ev["producer_id"] == ev["producer_id"].shift())
    gap = ev["timestamp"] - ev["timestamp"].shift()
    new = ev[~same | (gap > window_ms)]
    return new.sort_values(["principal", "timestamp", "producer_id"], kind="stable").reset_index(drop=True)


def _by_principal(new: pd.DataFrame):
    """(principal, sorted int64 timestamps) of each principal's new sightings."""
    for principal, group in new.groupby("principal", sort=True):
        yield principal, np.sort(group["timestamp"].to_numpy(dtype=np.int64))


def window_counts(new: pd.DataFrame, window_ms: int, slide_ms: int) -> pd.DataFrame:
    """New sightings per principal and window: principal, window_start, new_pids.

    Windows are ``[start, start + W)`` with ``start`` a multiple of
    ``slide_ms``, every one that overlaps the principal's span from its first
    to its last new sighting: ``first - W < start <= last``. A window in that
    span without new sightings counts 0. Example: W = 60 s, slide 15 s, new
    sightings at 0 s and 70 s: starts -45 s, ..., 60 s (8 windows), counts
    1, 1, 1, 1, 1, 1, 1, 1 (the window from 0 s holds 0 s only, the one
    from 15 s holds 70 s only).
    """
    if window_ms < 1 or slide_ms < 1:
        raise ValueError(f"window and slide must be >= 1 ms, got {window_ms}, {slide_ms}")
    frames = []
    for principal, ts in _by_principal(new):
        first_k = (int(ts[0]) - window_ms) // slide_ms + 1
        last_k = int(ts[-1]) // slide_ms
        starts = np.arange(first_k, last_k + 1, dtype=np.int64) * slide_ms
        counts = np.searchsorted(ts, starts + window_ms, "left") - np.searchsorted(ts, starts, "left")
        frames.append(pd.DataFrame({"principal": principal, "window_start": starts, "new_pids": counts}))
    if not frames:
        return _empty(COUNT_COLUMNS)
    return pd.concat(frames, ignore_index=True).astype({"window_start": "int64", "new_pids": "int64"})


def peaks(new: pd.DataFrame, window_ms: int) -> pd.DataFrame:
    """The most new sightings in any window ``[s, s + W)``, over every s: principal, peak.

    A fullest window can always start at a new sighting, so the peak is the
    most of ``#{j : t_i <= t_j < t_i + W}`` over the sightings i. It is at
    least the most of :func:`window_counts` and can be up to twice it: with
    W = 60 s and slide 15 s, 5 PIDs at 14 s and 5 at 61 s share no window
    from 0, 15, 30 s, ..., but do share the one from 14 s: peak 10, grid
    maximum 5. By :mod:`pidquota.recommend.rules`'s theorem,
    a quota of at least the peak never throttles the principal.
    """
    rows = []
    for principal, ts in _by_principal(new):
        inside = np.searchsorted(ts, ts + window_ms, "left") - np.arange(len(ts))
        rows.append((principal, int(inside.max())))
    return pd.DataFrame(rows, columns=list(PEAK_COLUMNS)).astype({"peak": "int64"})


def active_pids(events: pd.DataFrame) -> pd.DataFrame:
    """Distinct PIDs >= 0 per principal: principal, active_pids (principals with none left out)."""
    ev = events.loc[events["producer_id"] >= 0]
    out = ev.groupby("principal", sort=True)["producer_id"].nunique().rename("active_pids").reset_index()
    return out.astype({"active_pids": "int64"})


def pid_lives(events: pd.DataFrame, short_life_ms: int = DEFAULT_SHORT_LIFE_MS) -> pd.DataFrame:
    """:data:`LIFE_COLUMNS` per principal with PIDs >= 0, sorted by principal (0 where no
    PID is judged). Example, L = 10 s, input from 0 s to 100 s: PID 1 seen at 20 s and
    25 s is judged and short-lived; PID 2 seen at 20 s only is short-lived and one
    request; PID 3 seen at 95 s only is not judged (first seen under L before the end)."""
    span = events["timestamp"]
    lo, hi = (int(span.min()), int(span.max())) if len(span) else (0, 0)
    ev = events.loc[events["producer_id"] >= 0, ["principal", "producer_id", "timestamp"]].drop_duplicates()
    per_pid = ev.groupby(["principal", "producer_id"], sort=False)["timestamp"].agg(["min", "max", "size"])
    judged = per_pid[(per_pid["min"] + short_life_ms <= hi) & (per_pid["max"] >= lo + short_life_ms)]
    flags = pd.DataFrame(
        {
            "judged_pids": 1,
            "short_lived_pids": (judged["max"] - judged["min"] < short_life_ms).astype("int64"),
            "one_request_pids": (judged["size"] == 1).astype("int64"),
        },
        index=judged.index,
    )
    names = pd.Index(sorted(per_pid.index.get_level_values("principal").unique()), name="principal")
    counts = flags.groupby(level="principal").sum().reindex(names, fill_value=0)
    return counts.reset_index().astype({c: "int64" for c in LIFE_COLUMNS[1:]})[list(LIFE_COLUMNS)]


def window_stats(counts: pd.DataFrame, peak: pd.DataFrame, active: pd.DataFrame) -> pd.DataFrame:
    """p50 and p99 of each principal's window counts (numpy, method "linear"), its peak as
    ``max``, and its active PIDs: the columns :data:`WINDOW_COLUMNS`, one row per principal
    with new sightings, sorted by principal."""
    rows = []
    for principal, group in counts.groupby("principal", sort=True):
        p50, p99 = np.percentile(group["new_pids"].to_numpy(), [50, 99], method=PERCENTILE_METHOD)
        rows.append((principal, float(p50), float(p99)))
    pct = pd.DataFrame(rows, columns=["principal", "p50", "p99"])
    out = pct.merge(peak.rename(columns={"peak": "max"}), on="principal").merge(active, on="principal")
    return out[list(WINDOW_COLUMNS)].reset_index(drop=True)


def reference_stats(
    events: pd.DataFrame, window_ms: int, slide_ms: int, short_life_ms: int = DEFAULT_SHORT_LIFE_MS
) -> pd.DataFrame:
    """Steps 1 to 5 on a frame of events (principal, producer_id, timestamp): what the Spark
    job's first frame must equal."""
    new = new_sightings(events, window_ms)
    counts = window_counts(new, window_ms, slide_ms)
    windows = window_stats(counts, peaks(new, window_ms), active_pids(events))
    out = windows.merge(pid_lives(events, short_life_ms), on="principal")
    return out[list(STATS_COLUMNS)].reset_index(drop=True)


def with_suggestions(stats: pd.DataFrame, headroom: float) -> pd.DataFrame:
    """``stats`` plus ``suggested`` (:func:`pidquota.recommend.rules.suggest_rate` of p99) and ``fits``
    (max <= suggested: by the theorem, the suggestion would never have throttled the user)."""
    out = stats[list(STATS_COLUMNS)].copy()
    out["suggested"] = [suggest_rate(p, headroom) for p in out["p99"]]
    out["fits"] = out["max"] <= out["suggested"]
    return out.astype({"suggested": "int64", "fits": bool})


@dataclass(frozen=True)
class Basis:
    """What the numbers are measured in, stated in the output."""

    window_ms: int
    slide_ms: int
    headroom: float
    short_life_ms: int = DEFAULT_SHORT_LIFE_MS
    flood_factor: float = DEFAULT_FLOOD_FACTOR


@dataclass(frozen=True)
class DefaultSuggestion:
    """The suggested ``<default>`` (:func:`pidquota.recommend.rules.suggest_default`).

    ``share`` asked for; ``users`` it was drawn from (the users that are not
    suspected floods, :mod:`pidquota.recommend.floods`); ``covered``: those of them
    whose max is at most ``rate``, whom it would never have throttled (at least
    ``ceil(share x users)`` when the headroom is >= 1); ``floods``: the users left out.
    """

    rate: int
    share: float
    users: int
    covered: int
    floods: int = 0


def default_suggestion(usage: pd.DataFrame, headroom: float, share: float) -> DefaultSuggestion | None:
    """The ``<default>`` for the users of ``usage``, or None if there are none."""
    if usage.empty:
        return None
    maxima = usage["max"].tolist()
    rate = suggest_default(maxima, headroom, share)
    return DefaultSuggestion(rate, share, len(maxima), covered(maxima, rate))


# The what-if. To be merged with observe/report/data.py's offenders table (another
# branch), which computes these per user from the decisions too.
def what_if_summary(decisions: pd.DataFrame) -> pd.DataFrame:
    """Per principal in the decisions: throttles (THROTTLE decisions), throttled_pids
    (distinct PIDs with one or more), new_pids (distinct PIDs with a decision: the new
    PIDs the enforcer judged), first_throttle_ms (the earliest throttle's timestamp) and
    longest_throttle_ms (the largest throttle_time_ms); the last two are null for a
    principal never throttled. Example: PID 7 throttled twice then admitted, PID 8
    admitted: throttles 2, throttled_pids 1, new_pids 2."""
    throttled = decisions[decisions["verdict"] == THROTTLE]
    agg = throttled.groupby("principal").agg(
        throttles=("verdict", "size"),
        throttled_pids=("producer_id", "nunique"),
        first_throttle_ms=("timestamp", "min"),
        longest_throttle_ms=("throttle_time_ms", "max"),
    )
    judged = decisions.groupby("principal")["producer_id"].nunique().rename("new_pids")
    out = agg.reindex(judged.index).join(judged).rename_axis("principal").reset_index()
    for column in ("throttles", "throttled_pids"):
        out[column] = out[column].fillna(0).astype("int64")
    return out.astype({"first_throttle_ms": "Int64", "longest_throttle_ms": "Int64"})[list(WHAT_IF_COLUMNS)]


def what_if_view(usage: pd.DataFrame, summary: pd.DataFrame, quotas: Mapping[str, float]) -> pd.DataFrame:
    """Per principal of ``usage``: the candidate quota it resolves to (None: unlimited) and
    its what-if throttles (0 when the summary has no row for it)."""
    view = usage[["principal"]].merge(summary, on="principal", how="left")
    rates = [resolve(quotas, p) for p in view["principal"]]
    view.insert(1, "quota", pd.Series(rates, index=view.index, dtype=object))
    for column in ("throttles", "throttled_pids", "new_pids"):
        view[column] = view[column].fillna(0).astype("int64")
    return view.astype({"first_throttle_ms": "Int64", "longest_throttle_ms": "Int64"})


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object" if c == "principal" else "int64") for c in columns})
