"""Floods told from growth: per principal, how long its PIDs live, and whether it is a
*suspected flood*; then the quotas that hold every flood and throttle no one else.
Spark-free (pandas); the evidence is part of the statistics, which the Spark job computes too.

**Evidence** (:func:`pidquota.recommend.stats.pid_lives`), with L the short life (``--short-life``, 300 s) and
``[lo, hi]`` the input's span (its first and last event's timestamps):

* A PID's *life* is its last sighting minus its first (PIDs >= 0, per principal).
* A PID is *judged* when its sightings could have shown a life of L inside the input:
  first sighting at most ``hi - L`` and last at least ``lo + L``. A PID first seen
  near the end has had no time to live long, and one last seen near the start may have
  lived long before it; counting either would make long lives look short.
* ``judged_pids``, ``short_lived_pids`` (judged, life < L) and ``one_request_pids``
  (judged, seen at one timestamp only: one request).

A user with no judged PID (an input shorter than 2L judges none) has no lifetime
evidence and is never suspected: the table says so.

**Classification** (:func:`plan`), with f the flood factor (``--flood-factor``, 10):

1. *short-lived*: more than half of the user's judged PIDs lived under L;
2. *m*, the fleet median: the median peak (max new PIDs in any window W) of the users
   that are not short-lived (of all users when every one is);
3. a *suspected flood* is short-lived with ``peak > f x m``.

Both are needed: a small job that opens a producer per run is short-lived but not far
above the fleet, and a large steady application is far above it with long-lived PIDs.
Because m is taken over the long-lived users, floods cannot drag it up, even when they
are most of a five-user fleet; a median is one sort, so it scales to 10,000 users.

**Quotas**: the ``<default>`` comes from the users that are not floods
(:func:`pidquota.recommend.rules.suggest_default`). Each of them above it gets
:func:`pidquota.recommend.rules.growth_quota` (at least its peak: never throttled);
each flood gets :func:`pidquota.recommend.rules.flood_quota` (at most the default and
half its peak: throttled). So the quotas, applied, throttle every flood and no other
user, whatever the fleet's size.

Worked example, L = 300 s, f = 10, headroom 2, share 0.9; peaks (short-lived share):
orders 40 (0%), payments 20 (0%), ledger 10 (0%), nightly 3 (100%), crash 718 (100%).
m = median(40, 20, 10) = 20. nightly is short-lived but 3 <= 200: not a flood; crash
718 > 200: a flood. The default from 40, 20, 10, 3 (x 2 = 80, 40, 20, 6; k = ceil(0.9 x
4) = 4) is 80, so no one else needs a quota of their own, and crash gets
``min(80, 718 // 2)`` = 80.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pidquota.quota.resolver import DEFAULT_ENTITY
from pidquota.recommend.rules import (
    SHORT_LIVED_MAJORITY,
    covered,
    flood_quota,
    growth_quota,
    suggest_default,
)
from pidquota.recommend.stats import DefaultSuggestion

# What plan() adds to the statistics and suggestions.
PLAN_COLUMNS = ("short_lived", "one_request", "peak_ratio", "flood", "quota")


@dataclass(frozen=True)
class Fleet:
    """What the classification was measured against: the thresholds and the fleet median."""

    short_life_ms: int
    flood_factor: float
    median_peak: float | None  # None: no users
    judged: bool  # whether any PID's life could be judged


def _shares(usage: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Short-lived and one-request shares of the judged PIDs (NaN where none is judged)."""
    judged = usage["judged_pids"].where(usage["judged_pids"] > 0)
    return usage["short_lived_pids"] / judged, usage["one_request_pids"] / judged


def classify(usage: pd.DataFrame, short_life_ms: int, flood_factor: float) -> tuple[pd.DataFrame, Fleet]:
    """``usage`` plus ``short_lived``, ``one_request`` (shares, NaN without evidence),
    ``peak_ratio`` (max / m) and ``flood``; and the :class:`Fleet` (steps 1 to 3 above)."""
    out = usage.copy()
    out["short_lived"], out["one_request"] = _shares(out)
    short = (out["short_lived"] > SHORT_LIVED_MAJORITY).to_numpy()
    peaks = out["max"].to_numpy(dtype=np.float64)
    pool = peaks[~short] if (~short).any() else peaks
    median = float(np.median(pool)) if len(pool) else None
    out["peak_ratio"] = peaks / median if median else np.nan
    out["flood"] = short & (peaks > flood_factor * (median or 0))
    fleet = Fleet(short_life_ms, flood_factor, median, bool((out["judged_pids"] > 0).any()))
    return out, fleet


@dataclass(frozen=True)
class Plan:
    """The suggestion: ``usage`` (the statistics, ``suggested``, ``fits`` and
    :data:`PLAN_COLUMNS`), the ``<default>`` (None without users) and the :class:`Fleet`."""

    usage: pd.DataFrame
    default: DefaultSuggestion | None
    fleet: Fleet

    def quotas(self) -> dict[str, int]:
        """What the configs script sets: ``{<default>: rate, user: own quota, ...}``."""
        quotas = {} if self.default is None else {DEFAULT_ENTITY: self.default.rate}
        own = self.usage[self.usage["quota"].notna()]
        quotas.update(zip(own["principal"].tolist(), [int(q) for q in own["quota"]], strict=True))
        return quotas

    def floods(self) -> pd.DataFrame:
        return self.usage[self.usage["flood"]]


def plan(usage: pd.DataFrame, headroom: float, share: float, short_life_ms: int, flood_factor: float) -> Plan:
    """The :class:`Plan` for ``usage`` (:func:`pidquota.recommend.stats.with_suggestions`)."""
    classified, fleet = classify(usage, short_life_ms, flood_factor)
    if classified.empty:
        classified["quota"] = pd.Series([], dtype="Int64")
        return Plan(classified, None, fleet)
    calm = ~classified["flood"]
    peaks = classified.loc[calm, "max"].tolist()
    rate = suggest_default(peaks, headroom, share)
    default = DefaultSuggestion(rate, share, len(peaks), covered(peaks, rate), int((~calm).sum()))
    own = [
        flood_quota(peak, rate) if flood else growth_quota(suggested, peak)
        for peak, suggested, flood in zip(
            classified["max"].tolist(),
            classified["suggested"].tolist(),
            classified["flood"].tolist(),
            strict=True,
        )
    ]
    own = pd.Series(own, index=classified.index, dtype="Int64")
    classified["quota"] = own.where(classified["flood"] | (own > rate), pd.NA)
    return Plan(classified, default, fleet)


def evidence(row: dict, fleet: Fleet) -> str:
    """A user's flood evidence in one line, e.g. "100% of 1313 PIDs lived under 300 s,
    0% in one request; peak 718 new PIDs per W, 47.9x the fleet median 15"."""
    if not row["judged_pids"]:
        return "no PID's life could be judged"
    return (
        f"{row['short_lived']:.0%} of {int(row['judged_pids'])} PIDs lived under "
        f"{fleet.short_life_ms / 1000:g} s, {row['one_request']:.0%} in one request; peak "
        f"{int(row['max'])} new PIDs per W, {row['peak_ratio']:.1f}x the fleet median {fleet.median_peak:g}"
    )
