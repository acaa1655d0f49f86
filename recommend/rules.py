"""Quota suggestions: the rules of ``pidquota recommend``. Pure Python, clock-free.

What makes a user safe under a quota follows from the contract
(:class:`pidquota.quota.TokenBucket`): the bucket holds ``B = R`` tokens (R >= 1) and
refills at ``R`` per window W, so over any closed interval of length L at
most ``R + R * L / W`` new PIDs get in.

**Theorem.** A user whose new PIDs in *every* interval ``[s, s + W)``, for
every start s, number at most R is never throttled by a quota R.

Proof: at a first throttle at time t, let u be the last time the bucket was
full. Every PID since u was admitted and took a token, so the PIDs in
``[u, t]``, the throttled one included, number more than ``R + R * (t - u) / W``.
But ``k + 1`` intervals ``[u + iW, u + (i + 1)W)``, ``k = floor((t - u) / W)``,
cover ``[u, t]`` and hold at most ``(k + 1) R <= R + R (t - u) / W``. (For
R < 1 the premise means no new PIDs at all.)

"New" is the enforcer's notion, which :func:`pidquota.recommend.stats.new_sightings`
bounds from above: a PID seen again within W of its last sighting is known.
The peak must be taken over every start s, not over windows on a grid: two
bursts of R just inside two grid windows W apart can fall into one window
that starts in between, and a quota of R throttles that.

The suggestion rules (``suggest_rate``, ``suggest_default``) multiply by a
headroom in decimal, as the numbers print: ``50 x 1.1`` is 55, not
``55.00000000000001`` (which would round up to 56).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

from pidquota.conf.errors import ConfigError
from pidquota.quota.resolver import user_entity, validate_rate


def check_headroom(headroom: float) -> float:
    """A finite headroom > 0, or a :class:`ConfigError`."""
    return _checked(
        headroom, lambda x: 0 < x < math.inf, "headroom must be a number > 0", "2 for twice the usage"
    )


def check_share(share: float) -> float:
    """A share of users in (0, 1], or a :class:`ConfigError`."""
    return _checked(share, lambda x: 0 < x <= 1, "share of users must be in (0, 1]", "0.9 for 90%")


def _checked(value, in_range, rule: str, example: str) -> float:
    """``value`` if it is a number (not a bool) and ``in_range(value)``, else a :class:`ConfigError`
    saying ``rule``, the value and an ``example``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not in_range(value):
        raise ConfigError(f"{rule}, got {value!r}; e.g. {example}")
    return value


def _exact(x: float) -> Fraction:
    """``x`` as the decimal it prints as (``repr``), exactly."""
    return Fraction(repr(float(x)))


def _ceil_times(x: float, headroom: float) -> int:
    """``ceil(x * headroom)``, the product taken exactly in decimal."""
    return math.ceil(_exact(x) * _exact(headroom))


def suggest_rate(p99: float, headroom: float) -> int:
    """A user's suggested ``producer_ids_rate``: ``max(1, ceil(p99 * headroom))``.

    ``p99`` is the 99th percentile of the user's new PIDs per window W (over
    the windows of its active span); the headroom leaves room for growth and
    the rarer peaks. Example: p99 = 7.4 new PIDs per W with headroom 2 gives
    ``ceil(14.8)`` = 15; a user with p99 = 0.2 gets 1, the smallest whole quota.

    This sizes the quota for typical use. It is a guarantee only where the
    user's peak (max new PIDs in any window) is at most the suggestion: by
    the theorem above, such a user would never have been throttled by it.
    """
    if not 0 <= p99 < math.inf:
        raise ValueError(f"p99 must be a finite count >= 0, got {p99!r}")
    check_headroom(headroom)
    return max(1, _ceil_times(p99, headroom))


def suggest_default(peaks: Iterable[float], headroom: float, share: float = 0.9) -> int:
    """A ``<default>`` quota under which at least ``share`` of the users are never throttled.

    The rule: with ``v_1 <= ... <= v_n`` the users' ``peak * headroom``
    (peak = most new PIDs in any window ``[s, s + W)``), and
    ``k = ceil(share * n)``, the default is ``R = max(1, ceil(v_k))``.

    Then at least k users (a share of at least ``share``) have
    ``peak * headroom <= R``, and R is the smallest whole quota that covers
    that many. With headroom >= 1 each of them has ``peak <= R``, so by the
    theorem above none of them would have been throttled by R, with room to
    spare. (A user above R is not necessarily throttled: the bound is
    sufficient, not necessary.)

    Example: peaks 1, 2, ..., 9 and 40 (10 users), headroom 2, share 0.9:
    v = 2, 4, ..., 18, 80; k = 9; R = 18. Nine users of ten are safe under 18;
    the one with peak 40 needs a quota of its own.
    """
    h = _exact(check_headroom(headroom))
    peaks = list(peaks)
    if not peaks:
        raise ValueError("no users to suggest a default for")
    if not all(0 <= p < math.inf for p in peaks):
        raise ValueError(f"peaks must be finite counts >= 0, got {peaks!r}")
    values = sorted(_exact(p) * h for p in peaks)
    k = math.ceil(_exact(check_share(share)) * len(values))
    return max(1, math.ceil(values[k - 1]))


def covered(peaks: Iterable[float], rate: float) -> int:
    """How many users have ``peak <= rate``: by the theorem, never throttled by ``rate``."""
    return sum(1 for p in peaks if p <= rate)


def parse_what_if(text: str, origin: str = "--what-if") -> dict[str, float]:
    """Candidate quotas ``'User:alice=50,bob=20,<default>=100'`` as ``{entity: rate}``.

    Each comma-separated part is ``NAME=RATE``; NAME is read by
    :func:`pidquota.quota.resolver.user_entity` (``bob`` is ``User:bob``), RATE by
    :func:`pidquota.quota.resolver.validate_rate`. The last ``=`` of a part separates
    them, so a name may hold ``=``; it may not hold ``,`` (use a quota file).
    A user given twice, in either spelling, is refused.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{origin} is empty; give quotas such as 'User:alice=50,<default>=100'")
    quotas: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.strip().rpartition("=")
        if not sep:
            raise ConfigError(
                f"{origin}: {part.strip()!r} is not NAME=RATE; write e.g. 'User:alice=50,<default>=100'"
            )
        try:
            entity = user_entity(name.strip())
            rate = validate_rate(entity, value.strip())
        except ConfigError as exc:
            raise ConfigError(f"{origin}: {exc}") from None
        if entity in quotas:
            raise ConfigError(f"{origin} gives {entity!r} twice; give each user once")
        quotas[entity] = rate
    return quotas


# -- floods told from growth ------------------------------------------------------------
#
# KIP-936 exists because a misbehaving client makes PIDs that live for seconds (a crash
# loop's instance, a producer opened per batch or per error), while a growing or
# redeployed application makes PIDs that live for minutes to hours. Sizing a user's
# quota to its own history would legitimise a flood, so a *suspected flood* is held at
# the <default> (or below) and every other user is sized to never be throttled.

DEFAULT_SHORT_LIFE_S = 300
"""A PID living under this (last sighting minus first) is *short-lived*. 300 s: a crash
loop's, a per-error or a per-batch producer lives for seconds, while an autoscaler does
not retire an instance it has just started (Kubernetes' horizontal pod autoscaler
stabilises scale-down over 300 s by default) and a deployment's instances live hours."""


def fitted_short_life_ms(span_ms: int, default_ms: int = DEFAULT_SHORT_LIFE_S * 1000) -> int:
    """The short life L for an input that spans ``span_ms`` when none is given: the default,
    or a quarter of the span when the span is under 2 x the default (a PID is judged only
    when it could have lived L inside the input, so an input under 2L judges none, and an
    operator's first look, often minutes long, would find no flood). A quarter leaves the
    middle half of the input to judge in, in whole seconds. Example: a 9-minute request log
    (539 s from its first event to its last) gets L = 134 s; an hour's, 300 s."""
    if span_ms >= 2 * default_ms:
        return default_ms
    quarter = span_ms // 4
    return quarter // 1000 * 1000 if quarter >= 1000 else max(1, quarter)  # whole seconds, said so


DEFAULT_FLOOD_FACTOR = 10.0
"""A user is *far above* the fleet when its peak exceeds this many times the fleet's
median peak: an order of magnitude. One restart every 5 s is 720 new PIDs an hour; a
well-behaved user's new PIDs per hour are about its instance count, and the spread of
instance counts between most users of one cluster stays within a factor of ten."""

SHORT_LIVED_MAJORITY = 0.5
"""A user's PIDs are *mostly short-lived* when more than this share of its judged PIDs
are: a deployment or an autoscaler's churn touches a minority of its PIDs."""


def check_short_life(seconds: float) -> float:
    """A finite short-life threshold > 0 seconds, or a :class:`ConfigError`."""
    return _checked(seconds, lambda x: 0 < x < math.inf, "short life must be a number of seconds > 0", "300")


def check_flood_factor(factor: float) -> float:
    """A finite flood factor >= 1, or a :class:`ConfigError` (below 1 would flag users
    under the fleet's median)."""
    return _checked(
        factor, lambda x: 1 <= x < math.inf, "flood factor must be a number >= 1", "10 for ten times"
    )


def growth_quota(suggested: int, peak: int) -> int:
    """A well-behaved user's own quota: ``max(suggested, peak)``. At least its peak, so by
    the theorem above it would never have been throttled; at least the p99 rule's
    suggestion, so it keeps that room to grow. Example: suggested 15, peak 22 gives 22."""
    return max(int(suggested), int(peak))


def flood_quota(peak: int, default: int) -> int:
    """A suspected flood's quota: ``max(1, min(default, floor(peak / 2)))``, never above the
    ``<default>`` (no raise), and low enough that the flood is throttled.

    **Theorem (a flood is throttled).** If some window ``[s, s + W)`` holds N >= 2R
    first sightings of PIDs the enforcer does not remember, a quota R throttles at least
    one of them. Proof: the bucket holds at most R at s and refills ``R * (W - 1 ms) / W``
    by the window's last millisecond, so it admits fewer than 2R there; each PID it does
    not admit on its first sighting is a THROTTLE. A flood's PIDs are brand new, so with
    ``peak >= 2R`` it is throttled, short of Bloom false positives (a new PID taken for a
    known one, with the filter's false-positive rate), which N - 2R + 1 of them would have
    to be. With a flood factor >= 1 a flood's peak is above the fleet median (>= 1),
    so ``peak >= 2`` and the ``max(1, ...)`` never lifts R above ``peak / 2``.

    Example: peak 718 new PIDs per W and a <default> of 80 give 80 (718 >= 160); a
    <default> of 500 gives 359.
    """
    return max(1, min(int(default), int(peak) // 2))
