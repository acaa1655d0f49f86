"""The stateful operator: ``applyInPandasWithState`` glue around ``quota``.

Each group is the events of this micro-batch of a fixed group of
principals (``pidquota.state.buckets``; ``quota/states.py`` holds their
states in one row), or the dead letters, passed straight through. All quota
logic lives in :class:`pidquota.quota.PrincipalQuota`; this module only moves
columns and state.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
import pandas as pd

from pidquota.quota import ADMIT, THROTTLE, Decisions, PrincipalQuota, QuotaSettings, QuotaSource, resolve
from pidquota.quota.states import PrincipalStates
from pidquota.streaming.columns import DEAD_PRINCIPAL, KIND_DEAD, KIND_DECISION, KIND_METRIC, KIND_SKIPPED
from pidquota.streaming.schema import OUTPUT_COLUMNS, OUTPUT_SCHEMA

# PySpark's worker pads each group's output with all-NA rows and concatenates
# (pyspark/worker.py), which makes pandas 2.x warn on every batch. It is not
# ours to fix and says nothing about our data; this module is imported in the
# worker, so silence exactly that warning there.
warnings.filterwarnings(
    "ignore", message="The behavior of DataFrame concatenation with empty or all-NA", category=FutureWarning
)


_INDEX = {c: i for i, c in enumerate(OUTPUT_COLUMNS)}
_WIDTH = len(OUTPUT_COLUMNS)


def _row(**values) -> list:
    """One output row in ``OUTPUT_COLUMNS`` order, the missing columns null."""
    row = [None] * _WIDTH
    for name, value in values.items():
        row[_INDEX[name]] = value
    return row


# Every frame the operator yields has one pandas nullable dtype per column (Int64,
# Float64, boolean, string). PySpark concatenates a task's frames before Arrow: that
# is a block copy for these, but a per-value look at object columns (pandas' all-NA
# check); and these go to Arrow with their masks, without a per-value look either.
_DTYPES = {"long": "Int64", "integer": "Int32", "double": "Float64", "boolean": "boolean", "string": "string"}
_KINDS = tuple(pd.array([], dtype=_DTYPES[f.dataType.typeName()]).dtype for f in OUTPUT_SCHEMA.fields)


def _masked(dtype, values, mask) -> pd.api.extensions.ExtensionArray:
    if isinstance(dtype, pd.StringDtype):
        return pd.array(np.where(mask, None, values), dtype=dtype)
    return dtype.construct_array_type()(values.astype(dtype.numpy_dtype, copy=False), mask)


def _column(dtype, head, rows: list | None, n: int):
    """One output column: ``head`` (an array of ``n`` values, or None: null) followed by
    ``rows`` (a list, None for null)."""
    numpy_type = object if isinstance(dtype, pd.StringDtype) else dtype.numpy_dtype
    if head is None:
        head, head_mask = np.zeros(n, dtype=numpy_type), np.ones(n, dtype=bool)
    else:
        head_mask = np.zeros(n, dtype=bool)
    if not rows:
        return _masked(dtype, head, head_mask)
    mask = np.fromiter((v is None for v in rows), dtype=bool, count=len(rows))
    tail = np.array([v if v is not None else 0 for v in rows], dtype=numpy_type)
    return _masked(dtype, np.concatenate([head, tail]), np.concatenate([head_mask, mask]))


def _typed(columns: dict, n: int, rows: list[list] = ()) -> pd.DataFrame:
    """A frame of every output column: ``n`` rows given by column (``columns``, arrays by
    name, the others null), then ``rows`` (``_row`` lists)."""
    by_column = list(zip(*rows, strict=True)) if rows else [None] * _WIDTH
    data = {
        name: _column(dtype, columns.get(name), None if tail is None else list(tail), n)
        for name, dtype, tail in zip(OUTPUT_COLUMNS, _KINDS, by_column, strict=True)
    }
    return pd.DataFrame(data, columns=list(OUTPUT_COLUMNS), copy=False)


def _frame(rows: list[list]) -> pd.DataFrame:
    """Rows (``_row``) to one frame, in the operator's dtypes."""
    return _typed({}, 0, rows)


def _dead_letters(pdfs: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Dead letters as they are, and the counts of skipped lines summed per kind."""
    skipped: Counter = Counter()
    for pdf in pdfs:
        if len(pdf):
            letters = [json.loads(x) for x in pdf["dead"]]
            rows = []
            for d in letters:
                if "skipped" in d:
                    skipped.update(d["skipped"])
                else:
                    rows.append(
                        _row(kind=KIND_DEAD, raw=d.get("raw"), reason=d.get("reason"), source=d.get("source"))
                    )
            if rows:
                yield _frame(rows)
    if skipped:
        yield _frame([_row(kind=KIND_SKIPPED, what=k, count=n) for k, n in sorted(skipped.items())])


def unfold(pdf: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Rows of (principal, PID, arrays of sightings) (streaming/compact.py, streaming/screen.py)
    back to one entry per sighting, per principal: timestamps, producer ids, epochs."""
    lengths = pdf["timestamps"].map(len).to_numpy(dtype=np.int64)
    ts = np.concatenate(pdf["timestamps"].to_list()).astype(np.int64, copy=False)
    epochs = np.concatenate(pdf["epochs"].to_list()).astype(np.int64, copy=False)
    pids = np.repeat(pdf["producer_id"].to_numpy(dtype=np.int64), lengths)
    codes, names = pd.factorize(pdf["principal"])
    if len(names) == 1:
        return {names[0]: (ts, pids, epochs)}
    owner = np.repeat(codes, lengths)
    order = np.argsort(owner, kind="stable")
    ends = np.cumsum(np.bincount(owner, minlength=len(names)))
    ts, pids, epochs = ts[order], pids[order], epochs[order]
    out, begin = {}, 0
    for name, end in zip(names, ends.tolist(), strict=True):
        out[name] = (ts[begin:end], pids[begin:end], epochs[begin:end])
        begin = end
    return out


def _on_timeout(states: PrincipalStates, principal: str, watermark: int, settings: QuotaSettings) -> None:
    """An idle principal's timer passed: evict its state, or look again later. The
    state itself is left as it was (the cleanup done to decide is not kept)."""
    quota = PrincipalQuota.from_bytes(states.get(principal), settings)
    if quota.is_evictable(max(watermark, quota.now_ms)):
        states.remove(principal)
    else:  # late events moved it on
        states.set_timer(principal, max(quota.evict_at_ms(), watermark + 1))


def _untracked_metrics(principal: str, rate, ts: np.ndarray, ignored: int, stale: bool) -> list:
    """The metrics row of a principal with no state: unlimited, or only PID < 0 so far."""
    n = len(ts)
    return _row(
        kind=KIND_METRIC,
        principal=principal,
        timestamp=int(ts.max()),
        quota=rate,
        events=n,
        admitted=0,
        throttled=0,
        passed=n - ignored,
        ignored=ignored,
        quota_stale=stale,
    )


class Judged(NamedTuple):
    """One principal's verdicts of a batch (columns) and its metrics row."""

    principal: str
    quota: float
    decisions: Decisions
    metrics: list


def _judged(
    principal: str,
    quota: PrincipalQuota,
    decisions: Decisions,
    n: int,
    ignored: int,
    stale: bool,
    replay_until=None,
) -> Judged:
    """The principal's verdicts, and its metrics row. The row's ``admitted`` and
    ``throttled`` count the live decisions only: those before ``replay_until`` only
    rebuilt state (a batch may straddle that time) and count as ``passed``."""
    m = quota.metrics()
    admitted = decisions.admitted
    if replay_until is not None:
        admitted = admitted[decisions.timestamp >= replay_until]
    took = int(admitted.sum())
    throttled = len(admitted) - took
    m["throttle_time_ms"] = round(m["throttle_time_ms"])
    row = _row(
        kind=KIND_METRIC,
        principal=principal,
        timestamp=quota.now_ms,
        events=n,
        admitted=took,
        throttled=throttled,
        passed=n - ignored - took - throttled,
        ignored=ignored,
        quota_stale=stale,
        **m,
    )
    return Judged(principal, m["quota"], decisions, row)


def _judged_frame(judged: list[Judged]) -> pd.DataFrame:
    """Every principal's decision rows of the batch, built by columns, then their metrics rows."""
    counts = [len(j.decisions) for j in judged]
    n = sum(counts)
    metrics = [j.metrics for j in judged]
    if not n:
        return _frame(metrics)
    owner = np.repeat(np.arange(len(judged)), counts)
    parts = [j.decisions for j in judged if len(j.decisions)]
    cols = {
        "kind": np.full(n, KIND_DECISION, dtype=object),
        "principal": np.array([j.principal for j in judged], dtype=object)[owner],
        "quota": np.array([j.quota for j in judged], dtype=np.float64)[owner],
        "verdict": np.where(np.concatenate([d.admitted for d in parts]), ADMIT, THROTTLE).astype(object),
    }
    for name in ("producer_id", "producer_epoch", "timestamp", "throttle_time_ms", "tokens"):
        cols[name] = np.concatenate([getattr(d, name) for d in parts])
    return _typed(cols, n, metrics)


def _judge(
    principal: str,
    sightings,
    states: PrincipalStates,
    watermark: int,
    rate,
    stale: bool,
    settings,
    replay_until: int | None = None,
) -> Judged:
    """One principal's events of this batch: its verdicts and metrics row."""
    ts, pids, epochs = sightings
    ignored = int((pids < 0).sum())
    blob = states.get(principal)
    if rate is None or (ignored == len(ts) and blob is None):
        states.remove(principal)  # unlimited now, or nothing to track: no state, nothing to decide
        row = _untracked_metrics(principal, rate, ts, ignored, stale)
        return Judged(principal, rate, Decisions.empty(), row)
    if blob is not None:
        quota = PrincipalQuota.from_bytes(blob, settings)
        quota.apply_rate(rate)
    else:
        quota = PrincipalQuota(rate, settings, int(ts.min()))
    decisions = quota.judge_batch(ts, pids, epochs, replay_until)
    states.put(principal, quota.to_bytes(), max(quota.evict_at_ms(), watermark + 1))
    return _judged(principal, quota, decisions, len(ts), ignored, stale, replay_until)


def make_state_function(
    quotas: QuotaSource, settings: QuotaSettings, replay_until: int | None = None
) -> Callable[[tuple, Iterator[pd.DataFrame], object], Iterator[pd.DataFrame]]:
    """The function given to ``applyInPandasWithState``, closing over the quota
    source, the settings and the replay time (shipped to the executors once). Its
    key is a group of principals (``quota/states.py``), or the dead letters' group."""

    def judge(key: tuple, pdfs: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        (group,) = key
        if group == DEAD_PRINCIPAL:
            yield from _dead_letters(pdfs)
            return
        states = PrincipalStates.from_bytes(state.get[0]) if state.exists else PrincipalStates()
        watermark = state.getCurrentWatermarkMs()
        judged: list[Judged] = []
        touched: set[str] = set()
        if not state.hasTimedOut:
            frames = list(pdfs)
            pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
            snapshot, stale = quotas.snapshot(), bool(quotas.stale)  # stale: last known quotas in force
            for principal, sightings in unfold(pdf).items():
                touched.add(principal)
                rate = resolve(snapshot, principal)
                judged.append(
                    _judge(principal, sightings, states, watermark, rate, stale, settings, replay_until)
                )
        for principal in states.due(watermark, touched):
            _on_timeout(states, principal, watermark, settings)
        if len(states):
            state.update((states.to_bytes(),))
            state.setTimeoutTimestamp(states.next_timer_ms())
        elif state.exists:
            state.remove()
        if judged:
            yield _judged_frame(judged)

    return judge
