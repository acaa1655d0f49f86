"""A group of principals judged in one pass: their sightings, rates and saved states in,
their verdicts, states and metrics out, in one compiled call (issue 55).

The per-principal path (``PrincipalQuota.from_bytes``, ``apply_rate``, ``judge_batch``,
``to_bytes``, ``evict_at_ms``, ``metrics``) is the contract, and stays the reference: this
pass gives the very same verdicts, the same state *bytes*, the same timers and the same
metrics (tests/quota/test_group.py compares them), with the Python work per group instead
of per principal. It costs about 0.4 ms of Python per principal and batch to load a state
into objects, judge it and write it back (benchmarks/operator.py); here the compiled kernel
(``quota/kernel.py``'s ``_group``) sorts and folds each principal's sightings (a merge sort:
numpy's four-key ``lexsort`` cost ~0.25 ms a group), reads its bytes, judges its sightings
(rolling layers itself), records its samples, writes its bytes and computes its metrics.

Worked example: principals a (new, rate 2) and b (saved state, rate 100) share a group;
a's sightings are rows 0-3, (t=5, PID 9), (t=1, PID 7), (t=1, PID 7), (t=3, PID -1), b's row 4,
(t=4, PID 1): ``bounds = [0, 4, 5]``. Sorted and folded, a has (1, 7), (5, 9) and one
ignored sighting; it starts at t = 1 (its least time, the ignored one's included, as
``PrincipalQuota(rate, settings, min(ts))``), b from its bytes. The kernel judges a's two,
then b's one: three verdicts, rows 1, 0 and 4 of the input, ``GroupOutcome.bounds = [0, 2,
3]`` (had b's PID 1 been known: ``[0, 2, 2]``, no verdict).

A principal the kernel does not judge as the contract would (state of another version or
hash, saved under other settings, an integer credit past 2**53, bytes the contract would
refuse as corrupt) is marked :data:`ELSEWHERE` and left untouched, for the caller's
per-principal path.
"""

from __future__ import annotations

import numpy as np

from pidquota.quota import kernel
from pidquota.quota.decision import Decisions
from pidquota.quota.enforcer import QuotaSettings

ELSEWHERE = kernel.ELSEWHERE
_NO_REPLAY = np.iinfo(np.int64).min

# The group pass judges every group it can once the kernel is loaded (kernel.wanted); False: the per-principal path
# alone (the reference tests/quota/test_group.py compares against)
use_group = True


def available() -> bool:
    """Whether groups are judged in one pass here (numba compiled the kernel)."""
    return use_group and kernel.available() and kernel._grouped is not None


def wanted(n: int) -> bool:
    """Whether a group of ``n`` sightings is judged in one pass (``kernel.wanted``: the kernel
    is loaded once the process has been asked for enough sightings). Not counted here: until
    then each principal's ``judge_batch`` counts its own."""
    return use_group and kernel.wanted(n, count=False) and kernel._grouped is not None


class GroupOutcome:
    """The kernel's answer for a group's principals ``p = 0..P-1``: ``status[p]`` (0: judged;
    :data:`ELSEWHERE`), and for a judged one its state's bytes (:meth:`blob`), timer, metrics
    and verdicts (:meth:`decisions`, rows ``bounds[p]:bounds[p+1]`` of the verdict arrays)."""

    __slots__ = ("status", "_pool", "_offsets", "fmet", "imet", "bounds", "verdicts")

    def __init__(self, status, pool, offsets, fmet, imet, bounds, verdicts) -> None:
        self.status, self._pool, self._offsets = status.tolist(), pool.tobytes(), offsets.tolist()
        self.fmet, self.imet, self.bounds = fmet.tolist(), imet.tolist(), bounds.tolist()
        self.verdicts = verdicts

    def blob(self, p: int) -> bytes:
        """Principal ``p``'s state, as ``PrincipalQuota.to_bytes`` writes it."""
        return self._pool[self._offsets[p] : self._offsets[p + 1]]

    def timer(self, p: int) -> int:
        return self.imet[p][kernel.I_TIMER]

    def now_ms(self, p: int) -> int:
        return self.imet[p][kernel.I_NOW]

    def live(self, p: int) -> tuple[int, int]:
        """Verdicts at or after the replay's end: (admitted, throttled)."""
        row = self.imet[p]
        return row[kernel.I_TOOK], row[kernel.I_REFUSED]

    def metrics(self, p: int, rate) -> dict:
        """``PrincipalQuota.metrics()`` of principal ``p``, with ``throttle_time_ms`` rounded."""
        f, i = self.fmet[p], self.imet[p]
        return {
            "quota": float(rate),
            "rate": f[kernel.F_RATE],
            "tokens": f[kernel.F_TOKENS],
            "throttle_time_ms": round(f[kernel.F_THROTTLE]),
            "admitted_total": i[kernel.I_ADMITTED],
            "throttled_total": i[kernel.I_THROTTLED],
            "active_pids_estimate": int(round(f[kernel.F_ESTIMATE])),
            "layers": i[kernel.I_LAYERS],
            "state_bytes": i[kernel.I_BYTES],
        }

    def decisions(self, p: int) -> Decisions:
        """Principal ``p``'s verdicts, as ``PrincipalQuota.judge_batch`` gives them."""
        a, b = self.bounds[p], self.bounds[p + 1]
        return Decisions(*(column[a:b] for column in self.verdicts))


def judge_group(
    ts: np.ndarray,
    pids: np.ndarray,
    epochs: np.ndarray,
    bounds: np.ndarray,
    blobs: list[bytes | None],
    rates: list,
    settings: QuotaSettings,
    watermark: int,
    replay_until: int | None = None,
) -> GroupOutcome:
    """Principal ``p``'s sightings are rows ``bounds[p]:bounds[p+1]`` (at least one each, in
    any order, PIDs < 0 among them; int64 arrays), its rate ``rates[p]`` (> 0) and its saved
    state ``blobs[p]`` (None: new). Requires :func:`available`."""
    n_principals = len(rates)
    sizes = [0 if b is None else len(b) for b in blobs]
    boffs = np.zeros(n_principals + 1, np.int64)
    np.cumsum(sizes, out=boffs[1:])
    pool = np.frombuffer(b"".join(b for b in blobs if b), dtype=np.uint8)
    status, out, offsets, fmet, imet, vb, (idx, _, wait, tokens, admitted) = kernel._grouped(
        ts,
        pids,
        epochs,
        np.asarray(bounds, dtype=np.int64),
        np.asarray(rates, dtype=np.float64),
        np.array([b is None for b in blobs], dtype=np.bool_),  # b"": corrupt, not new
        pool,
        boffs,
        settings.window_ms,
        settings.layer_count,
        settings.false_positive_rate,
        settings.cleanup_interval_ms,
        settings.window_num,
        int(watermark),
        _NO_REPLAY if replay_until is None else int(replay_until),
    )
    k = int(vb[-1])
    idx = idx[:k]  # rows of the input
    verdicts = (pids[idx], epochs[idx], ts[idx], admitted[:k], wait[:k], tokens[:k])
    return GroupOutcome(status, out, offsets, fmet, imet, vb, verdicts)
