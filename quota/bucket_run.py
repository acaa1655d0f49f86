"""A run of requests to a :class:`TokenBucket`, judged at once and committed in part."""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from pidquota.quota.bucket import SLACK, TokenBucket

# Integer credit is computed in int64 only while it stays exact in a float64 too
_EXACT = 1 << 53


class BucketRun:
    """``try_take`` at each of ``times`` (non-decreasing), without touching the bucket.

    A refusal does not move the bucket (:meth:`TokenBucket.try_take`), so the
    run only has to find the takes: from a take at ``t0`` leaving credit
    ``c``, the next request admitted is the first at or after
    ``t0 + ceil((W - c) / R)`` (integer R: a bisect; otherwise a bisect on
    the bucket's own test). Every refused request ``i`` then has, from the
    last take before it, ``credit_i = min(B W, c + R (t_i - t0))``, its wait
    ``ceil((W - credit_i) / R)`` and its tokens ``credit_i / W``, in numpy.
    The Python loop runs once per take, never per refusal.

    Worked example, R = 2 per W = 60 s, full (B W = 120000), requests at
    t = 0, 0, 0, 10 s, 40 s: takes at 0 and 0 (credit 0); the next take needs
    ceil(60000 / 2) = 30000 ms, so the third and the fourth are refused (waits
    30000 and 20000 ms) and the fifth, at 40 s, is admitted.

    :meth:`commit` moves the bucket to its state after the first ``m``
    requests: a caller that learns only part of the run was real keeps that
    part, exactly as if it had called ``try_take`` that many times.
    """

    __slots__ = ("admitted", "wait", "tokens", "_takes", "_bucket")

    def __init__(self, bucket: TokenBucket, times: np.ndarray) -> None:
        self._bucket = bucket
        tl = times.tolist()
        self._takes = takes = _find_takes(bucket, tl)  # (index, credit after, time)
        n = len(tl)
        self.admitted = np.zeros(n, dtype=bool)
        self.wait = np.zeros(n, dtype=np.int64)
        self.tokens = np.zeros(n, dtype=np.float64)
        if not n:
            return
        at = np.fromiter((k for k, _, _ in takes), dtype=np.int64, count=len(takes))
        self.admitted[at] = True
        window = bucket.window_ms
        self.tokens[at] = [c / window for _, c, _ in takes]
        refused = np.flatnonzero(~self.admitted)
        if len(refused):
            which = np.searchsorted(at, refused)  # takes before each refusal: its anchor
            credit = [bucket.credit] + [c for _, c, _ in takes]
            since = [bucket.last_ms] + [t for _, _, t in takes]
            wait, tokens = _refusals(bucket, times[refused], which, credit, since)
            self.wait[refused], self.tokens[refused] = wait, tokens

    def commit(self, m: int) -> int:
        """Leave the bucket as ``m`` calls to ``try_take`` would; return how many took."""
        took = bisect_left(self._takes, m, key=lambda x: x[0])
        if took:
            _, credit, t = self._takes[took - 1]
            self._bucket.credit, self._bucket.last_ms = credit, t
        return took


def _find_takes(bucket: TokenBucket, tl: list[int]) -> list[tuple[int, float, int]]:
    """The requests that take a token, with the credit and time each leaves."""
    window, rate = bucket.window_ms, bucket.rate
    slack = SLACK * window
    if isinstance(rate, int) and isinstance(bucket.credit, int) and slack < 1:
        return _find_takes_exact(bucket, tl)
    probe = TokenBucket(rate, window, bucket.last_ms)
    probe.credit = bucket.credit
    takes, i, n = [], 0, len(tl)
    while i < n:
        credit = probe.credit_at(tl[i])
        if window - credit <= slack:
            probe.credit = max(0, credit - window)
            probe.last_ms = max(probe.last_ms, tl[i])
            takes.append((i, probe.credit, probe.last_ms))
            i += 1
        else:
            i = bisect_left(tl, True, i + 1, key=lambda t: window - probe.credit_at(t) <= slack)
    return takes


def _find_takes_exact(bucket: TokenBucket, tl: list[int]) -> list[tuple[int, int, int]]:
    """:func:`_find_takes` for an integer R and credit: ``TokenBucket.credit_at`` and
    ``try_take``'s arithmetic inlined on local integers (a call per request cost more than
    the arithmetic; the operator builds a run per segment of each principal's batch)."""
    window, rate = bucket.window_ms, bucket.rate
    cap = bucket.capacity_credit
    full = cap - SLACK * window  # credit at or above it is the capacity (credit_at)
    credit, last = bucket.credit, bucket.last_ms
    takes, i, n = [], 0, len(tl)
    while i < n:
        t = tl[i]
        now = credit
        if t > last:
            now = credit + rate * (t - last)
            if now >= full:
                now = cap
        if now >= window:  # window - now <= SLACK * window < 1, in integers
            credit = now - window
            if t > last:
                last = t
            takes.append((i, credit, last))
            i += 1
        else:  # credit reaches W at last + ceil((W - credit) / R)
            i = bisect_left(tl, last + -(-(window - credit) // rate), i + 1)
    return takes


def _refusals(bucket: TokenBucket, times: np.ndarray, which: np.ndarray, credit: list, since: list):
    """Wait and tokens of refused requests at ``times``, each from its anchor ``which``."""
    window, rate = bucket.window_ms, bucket.rate
    cap = bucket.capacity_credit
    # an integer R keeps an integer starting credit integer through every take (_find_takes)
    if isinstance(rate, int) and isinstance(credit[0], int) and cap < _EXACT:
        c0 = np.asarray(credit, dtype=np.int64)[which]
        dt = times - np.asarray(since, dtype=np.int64)[which]
        grown = c0 + rate * np.minimum(dt, cap // rate + 2)  # no overflow: capped below
        now = np.where(dt > 0, np.where(grown >= cap - SLACK * window, cap, grown), c0)
        return -((now - window) // rate), now / window
    out_wait, out_tokens = [], []
    probe = TokenBucket(rate, window, 0)
    for t, k in zip(times.tolist(), which.tolist(), strict=True):
        probe.credit, probe.last_ms = credit[k], since[k]
        now = probe.credit_at(t)
        out_wait.append(int(-(-(window - now) // rate)))
        out_tokens.append(now / window)
    return np.asarray(out_wait, dtype=np.int64), np.asarray(out_tokens, dtype=np.float64)
