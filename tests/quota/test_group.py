"""A group judged in one pass (quota/group.py) gives what the per-principal path gives:
the same verdicts, the same state bytes, timers and metrics, batch after batch."""

import struct

import numpy as np
import pytest
from test_batch import OLD_STATE

from pidquota.bloom import layer as bloom_layer
from pidquota.bloom import layered
from pidquota.quota import PrincipalQuota, QuotaSettings, enforcer, group, kernel
from pidquota.quota.samples import _SAMPLE


def test_the_group_pass_is_compiled_here():
    assert group.available()


def test_the_kernels_offsets_are_the_structs_sizes():
    assert enforcer._HEADER.size == kernel.HEAD
    assert _SAMPLE.size == kernel.SAMPLE
    assert layered._HEADER.size == kernel.BLOOM_HEAD
    assert 1 + bloom_layer._HEADER.size + struct.calcsize("<Q") == kernel.LAYER_HEAD
    assert (kernel.STATE_VERSION, kernel.BLOOM_VERSION) == (enforcer.VERSION, layered.VERSION)


def reference(blob, rate, settings, ts, pids, epochs, watermark, replay_until):
    """streaming/operator.py's judge_principal, one principal at a time."""
    if blob is None:
        q = PrincipalQuota(rate, settings, int(ts.min()))
    else:
        q = PrincipalQuota.from_bytes(blob, settings)
        q.apply_rate(rate)
    decisions = q.judge_batch(ts, pids, epochs, replay_until)
    saved, timer = q.to_bytes(), max(q.evict_at_ms(), watermark + 1)
    m = q.metrics()
    m["throttle_time_ms"] = round(m["throttle_time_ms"])
    return decisions.rows(), saved, timer, m, q.now_ms


def _batch(rng, names, clock, pool, w):
    """Some of the principals' sightings of one batch, in any order, PIDs < 0 among them."""
    chosen = [p for p in names if rng.random() < 0.7] or names[:1]
    parts = []
    for _ in chosen:
        n = int(rng.integers(1, 300))
        new = rng.random() < 0.3  # a flood: every PID new
        pids = np.arange(pool[0], pool[0] + n) if new else rng.integers(-1, int(rng.integers(2, 600)), n)
        pool[0] += n
        if rng.random() < 0.05:
            pids = np.full(n, -1)  # nothing idempotent
        spread = int(rng.choice([1, w // 20, w // 2]))
        ts = clock + rng.integers(-spread // 4, spread, n)  # late ones too
        parts.append((ts.astype(np.int64), pids.astype(np.int64), rng.integers(0, 3, n)))
    return chosen, parts


def _case(seed):
    rng = np.random.default_rng(seed)
    w = int(rng.choice([10_000, 60_000, 3_600_000]))
    settings = QuotaSettings(
        window_ms=w,
        layer_count=int(rng.integers(1, 6)),
        false_positive_rate=float(rng.choice([0.01, 0.2, 0.5])),
        cleanup_interval_ms=int(rng.choice([1, 10, 10_000])),
        window_num=int(rng.choice([2, 11])),
    )
    return rng, settings, w


@pytest.mark.parametrize("seed", range(60))
def test_a_group_gives_what_each_principal_gives(seed):
    rng, settings, w = _case(seed)
    names = [f"User:u{k}" for k in range(int(rng.integers(1, 9)))]
    rates = {p: rng.choice([1, 3, 7, 100, 1000, 0.5, 2.7]).item() for p in names}
    states: dict[str, bytes] = {}
    clock, pool = 1_000_000, [0]
    for _ in range(int(rng.integers(2, 8))):
        clock += int(rng.choice([1, w // 10, w, 3 * w]))
        if rng.random() < 0.2:
            rates[names[0]] = rng.choice([1, 50, 0.25, 4.5]).item()  # a quota changed
        chosen, parts = _batch(rng, names, clock, pool, w)
        replay_until = clock if rng.random() < 0.2 else None
        watermark = clock - int(rng.integers(0, w))
        bounds = np.cumsum([0, *(len(ts) for ts, _, _ in parts)])
        ts, pids, epochs = (np.concatenate([part[k] for part in parts]) for k in range(3))
        got = group.judge_group(
            ts, pids, epochs, bounds, [states.get(p) for p in chosen], [rates[p] for p in chosen],
            settings, watermark, replay_until,
        )  # fmt: skip
        for k, p in enumerate(chosen):
            want = reference(states.get(p), rates[p], settings, *parts[k], watermark, replay_until)
            assert got.status[k] == 0
            assert got.decisions(k).rows() == want[0]
            assert got.blob(k) == want[1], (p, k)
            assert (got.timer(k), got.metrics(k, rates[p]), got.now_ms(k)) == want[2:]
            states[p] = got.blob(k)


def _crafted() -> dict[str, bytes]:
    """States the kernel must not judge, by what is wrong or other in them."""
    settings = QuotaSettings()
    fresh = PrincipalQuota(100, settings, 0)
    fresh.judge_batch(np.arange(5), np.arange(5), np.zeros(5, np.int64))
    good = fresh.to_bytes()
    counted = PrincipalQuota(100, settings, 0)
    counted.admitted_total = 2**53 + 1  # a count a double does not hold
    bloom_at = enforcer._HEADER.size + 4 + 32 * len(fresh.stats.samples) + 4
    many = bytearray(good)
    struct.pack_into("<I", many, bloom_at + 24, 10**6)  # claims a million layers
    return {
        "the old hash": OLD_STATE.read_bytes(),
        "other settings": PrincipalQuota(100, QuotaSettings(window_ms=60_000), 0).to_bytes(),
        "truncated": good[:-3],
        "empty": b"",
        "a time near 2**63": PrincipalQuota(10, settings, 2**63 - 2**14).to_bytes(),
        "a count past 2**53": counted.to_bytes(),
        "a million layers claimed": bytes(many),
    }


def test_state_the_kernel_does_not_read_is_left_to_the_per_principal_path():
    """Layers of the old hash, state saved under other settings, bytes the contract refuses
    or values a double does not hold: marked ELSEWHERE (the kernel neither hangs nor reads
    past them), and the group's other principal judged all the same."""
    settings = QuotaSettings()
    crafted = _crafted()
    blobs = [*crafted.values(), PrincipalQuota(100, settings, 0).to_bytes()]
    ts = np.full(len(blobs), 10, np.int64)
    got = group.judge_group(ts, ts, ts, np.arange(len(blobs) + 1), blobs, [100] * len(blobs), settings, 0)
    assert dict(zip(crafted, got.status, strict=False)) == dict.fromkeys(crafted, kernel.ELSEWHERE)
    assert got.status[-1] == 0
