"""The stateful operator: ``applyInPandasWithState`` glue around ``quota``.

Each group is one principal's events of this micro-batch (or the dead
letters, passed straight through). All quota logic lives in
:class:`quota.PrincipalQuota`; this module only moves columns and state.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd

from quota import ADMIT, PrincipalQuota, QuotaSettings, QuotaSource, resolve
from streaming.schema import KIND_DEAD, KIND_DECISION, KIND_METRIC, OUTPUT_COLUMNS

# PySpark's worker pads each group's output with all-NA rows and concatenates
# (pyspark/worker.py), which makes pandas 2.x warn on every batch. It is not
# ours to fix and says nothing about our data; this module is imported in the
# worker, so silence exactly that warning there.
warnings.filterwarnings(
    "ignore", message="The behavior of DataFrame concatenation with empty or all-NA", category=FutureWarning
)


def _frame(rows: dict[str, object], n: int) -> pd.DataFrame:
    """An output frame with every output column, the missing ones null."""
    data = {c: rows.get(c, [None] * n) for c in OUTPUT_COLUMNS}
    return pd.DataFrame(data, columns=list(OUTPUT_COLUMNS))


def _dead_letters(pdfs: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for pdf in pdfs:
        n = len(pdf)
        if n:
            yield _frame({"kind": [KIND_DEAD] * n, "raw": pdf["raw"], "reason": pdf["reason"]}, n)


def make_state_function(
    quotas: QuotaSource, settings: QuotaSettings
) -> Callable[[tuple, Iterator[pd.DataFrame], object], Iterator[pd.DataFrame]]:
    """The function given to ``applyInPandasWithState``, closing over the quota
    source and settings (both are shipped to the executors once)."""

    def judge(key: tuple, pdfs: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        kind, principal = key
        if kind == KIND_DEAD:
            yield from _dead_letters(pdfs)
            return
        watermark = state.getCurrentWatermarkMs()
        if state.hasTimedOut:
            quota = PrincipalQuota.from_bytes(state.get[0], settings)
            if quota.is_evictable(max(watermark, quota.now_ms)):
                state.remove()
            else:  # late events moved it on; look again later
                state.setTimeoutTimestamp(max(quota.evict_at_ms(), watermark + 1))
            return
        pdf = pd.concat(list(pdfs), ignore_index=True)
        ts = pdf["timestamp"].to_numpy(dtype=np.int64)
        pids = pdf["producer_id"].to_numpy(dtype=np.int64)
        epochs = pdf["producer_epoch"].to_numpy(dtype=np.int64)
        n = len(pdf)
        ignored = int((pids < 0).sum())
        rate = resolve(quotas.snapshot(), principal)
        if rate is None:  # unlimited: no Bloom state, nothing to decide
            if state.exists:
                state.remove()
            metric = {"quota": [None], "events": [n], "admitted": [0], "throttled": [0]}
            metric.update(passed=[n - ignored], ignored=[ignored], timestamp=[int(ts.max())])
            yield _frame({"kind": [KIND_METRIC], "principal": [principal], **metric}, 1)
            return
        if state.exists:
            quota = PrincipalQuota.from_bytes(state.get[0], settings)
            quota.apply_rate(rate)
        else:
            quota = PrincipalQuota(rate, settings, int(ts.min()))
        decisions = quota.observe_batch(ts, pids, epochs)
        state.update((quota.to_bytes(),))
        state.setTimeoutTimestamp(max(quota.evict_at_ms(), watermark + 1))

        admitted = sum(1 for d in decisions if d.verdict == ADMIT)
        throttled = len(decisions) - admitted
        m = quota.metrics()
        if decisions:
            cols = list(zip(*decisions, strict=True))
            k = len(decisions)
            yield _frame(
                {
                    "kind": [KIND_DECISION] * k,
                    "principal": [principal] * k,
                    "producer_id": cols[0],
                    "producer_epoch": cols[1],
                    "timestamp": cols[2],
                    "verdict": cols[3],
                    "throttle_time_ms": cols[4],
                    "tokens": cols[5],
                    "quota": [m["quota"]] * k,
                },
                k,
            )
        metric = {name: [value] for name, value in m.items()}
        metric.update(
            throttle_time_ms=[round(m["throttle_time_ms"])],
            kind=[KIND_METRIC],
            principal=[principal],
            timestamp=[quota.now_ms],
            events=[n],
            admitted=[admitted],
            throttled=[throttled],
            passed=[n - ignored - admitted - throttled],
            ignored=[ignored],
        )
        yield _frame(metric, 1)

    return judge
