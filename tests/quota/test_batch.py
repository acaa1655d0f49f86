"""The batch judge (quota/batch.py) decides exactly as the contract does one sighting at a time."""

from pathlib import Path

import numpy as np
import pytest

from pidquota.bloom.hashing import LEGACY, MIX64
from pidquota.quota import PrincipalQuota, QuotaSettings, enforcer
from pidquota.quota.bucket import TokenBucket
from pidquota.quota.bucket_run import BucketRun

OLD_STATE = Path(__file__).parent / "data" / "state-v2-bloom-v1.bin"


def one_at_a_time(q, ts, pids, epochs, replay_until=None):
    """``observe`` over the batch sorted by (t, pid, epoch), repeats of (t, pid) folded."""
    keep = pids >= 0
    ts, pids, epochs = ts[keep], pids[keep], epochs[keep]
    order = np.lexsort((epochs, pids, ts))
    out, seen = [], set()
    for t, p, e in zip(ts[order].tolist(), pids[order].tolist(), epochs[order].tolist(), strict=True):
        if (t, p) not in seen:
            seen.add((t, p))
            d = q.observe(t, p, e, replay_until is not None and t < replay_until)
            if d is not None:
                out.append(d)
    return out


def live_layers(q):
    w = q.filter.window_ms
    return [
        (x.created_ms, x.last_insert_ms, x.count) for x in q.filter.layers if q.now_ms - x.last_insert_ms <= w
    ]


def case(seed):
    """A random principal: window, layers, false-positive rate, quota, traffic, replay."""
    rng = np.random.default_rng(seed)
    w = int(rng.choice([10_000, 60_000, 3_600_000]))
    settings = QuotaSettings(
        window_ms=w,
        layer_count=int(rng.integers(1, 6)),
        false_positive_rate=float(rng.choice([0.01, 0.2, 0.5])),  # high rates: collisions happen
        cleanup_interval_ms=int(rng.choice([1, 10, 10_000])),
    )
    rate = rng.choice([1, 3, 40, 100, 1000, 0.5, 2.7]).item()
    n = int(rng.integers(1, 2500))
    ts = np.sort(rng.integers(0, int(rng.choice([w // 10, 3 * w, 10 * w])), n))
    pids = rng.integers(-1, int(rng.integers(1, 800)), n)
    epochs = rng.integers(0, 3, n)
    replay_until = int(ts[n // 3]) if rng.random() < 0.3 else None
    return rng, settings, rate, (ts, pids, epochs), replay_until


@pytest.fixture
def batch_judge(monkeypatch):
    """Every batch through the batch judge, however small (judge_batch takes the
    cheaper of the two ways, and both must decide the same)."""
    monkeypatch.setattr(enforcer, "_one_by_one_is_cheaper", lambda sightings, distinct: False)
    monkeypatch.setattr(enforcer, "use_kernel", False)  # the numpy judge, not the compiled one


@pytest.mark.parametrize("seed", range(60))
def test_a_batch_decides_as_one_sighting_at_a_time(seed, batch_judge):
    rng, settings, rate, (ts, pids, epochs), replay_until = case(seed)
    batch, single = PrincipalQuota(rate, settings), PrincipalQuota(rate, settings)
    for chunk in np.array_split(np.arange(len(ts)), int(rng.integers(1, 6))):
        shuffled = rng.permutation(chunk)  # any input order
        got = batch.observe_batch(ts[shuffled], pids[shuffled], epochs[shuffled], replay_until)
        assert got == one_at_a_time(single, ts[chunk], pids[chunk], epochs[chunk], replay_until)
        if rng.random() < 0.5:  # saved and loaded between micro-batches, as the stream does
            batch = PrincipalQuota.from_bytes(batch.to_bytes(), settings)
            single = PrincipalQuota.from_bytes(single.to_bytes(), settings)
    assert (batch.now_ms, batch.bucket.credit, batch.bucket.last_ms) == (
        single.now_ms,
        single.bucket.credit,
        single.bucket.last_ms,
    )
    assert (batch.admitted_total, batch.throttled_total) == (single.admitted_total, single.throttled_total)
    assert batch.stats.samples == single.stats.samples
    assert live_layers(batch) == live_layers(single)


def test_the_cases_reach_every_path(batch_judge):
    """The random cases above are not all easy: collisions, full layers and rolls happen."""
    rolls = throttled = replayed = 0
    for seed in range(60):
        _, settings, rate, (ts, pids, epochs), replay_until = case(seed)
        q = PrincipalQuota(rate, settings)
        d = q.judge_batch(ts, pids, epochs, replay_until)
        throttled += int((~d.admitted).sum())
        replayed += replay_until is not None
        rolls += len(q.filter) > 1
    assert rolls > 20 and throttled > 1000 and replayed > 5


def test_small_steady_batches_go_one_at_a_time_and_floods_in_a_batch():
    assert enforcer._one_by_one_is_cheaper(200, 10)
    assert not enforcer._one_by_one_is_cheaper(200, 200)


def test_columns_equal_the_list():
    q1, q2 = PrincipalQuota(5, QuotaSettings()), PrincipalQuota(5, QuotaSettings())
    ts, pids = np.arange(50, dtype=np.int64) * 1000, np.arange(50, dtype=np.int64) % 20
    cols = q1.judge_batch(ts, pids, np.zeros(50, dtype=np.int64))
    assert cols.rows() == q2.observe_batch(ts, pids, np.zeros(50, dtype=np.int64))
    assert len(cols) == 40 and cols.admitted.sum() == 5  # PIDs 5..19 throttled at each sighting


@pytest.mark.parametrize("rate", [3, 2.7, 1000, 0.25])
def test_a_bucket_run_answers_as_try_take(rate):
    rng = np.random.default_rng(int(rate * 100))
    times = np.sort(rng.integers(0, 3_600_000, 2000))
    bucket, one = TokenBucket(rate, 3_600_000, 0), TokenBucket(rate, 3_600_000, 0)
    run = BucketRun(bucket, times)
    waits = [one.try_take(t) for t in times.tolist()]
    assert run.wait.tolist() == [w if w else 0 for w in waits]
    assert run.admitted.tolist() == [w == 0 for w in waits]
    assert run.commit(1500) == sum(w == 0 for w in waits[:1500])
    again = TokenBucket(rate, 3_600_000, 0)
    for t in times[:1500].tolist():
        again.try_take(t)
    assert (bucket.credit, bucket.last_ms) == (again.credit, again.last_ms)


@pytest.mark.parametrize("seed", range(6))
def test_a_bucket_run_from_a_spent_bucket_answers_as_try_take_even_before_its_last_take(seed):
    """A bucket part spent at a time later than some requests (a late event: time is the
    principal's own), integer R and credit (BucketRun's exact path) and a float R."""
    rng = np.random.default_rng(seed)
    rate = [3, 100, 1][seed % 3] if seed < 3 else [2.5, 0.5, 7.25][seed % 3]
    last = 600_000
    times = np.sort(rng.integers(0, 1_800_000, 400))
    fresh = [TokenBucket(rate, 3_600_000, last) for _ in range(2)]
    for b in fresh:
        for _ in range(int(rate) // 2 + 1):
            b.try_take(last)  # spent at `last`, after the first requests
    bucket, one = fresh
    run = BucketRun(bucket, times)
    waits = [one.try_take(t) for t in times.tolist()]
    assert run.admitted.tolist() == [w == 0 for w in waits]
    assert run.wait.tolist() == waits
    assert run.commit(len(times)) == sum(w == 0 for w in waits)
    assert (bucket.credit, bucket.last_ms) == (one.credit, one.last_ms)


def test_a_state_saved_before_the_new_hash_still_resumes():
    """A state written by the previous release (its Bloom layers hashed by pybloom-live):
    PIDs 1000..1059 admitted at t = 0..1180 s, R = 100 per hour."""
    q = PrincipalQuota.from_bytes(OLD_STATE.read_bytes(), QuotaSettings())
    assert [x.kind for x in q.filter.layers] == [LEGACY, LEGACY]
    assert q.admitted_total == 60
    known = np.arange(1000, 1060, dtype=np.int64)
    t = 1_200_000
    assert len(q.judge_batch(np.full(60, t), known, np.zeros(60, dtype=np.int64))) == 0  # all still known
    assert q.filter.layers[-1].kind == MIX64  # refreshed into a new layer, with the new hash
    new = q.judge_batch(np.full(5, t + 1), np.arange(5, dtype=np.int64), np.zeros(5, dtype=np.int64))
    assert new.admitted.tolist() == [True] * 5
    later = t + 3_600_000  # the legacy layers have aged out; what was refreshed is known for W
    assert len(q.judge_batch(np.full(60, later), known, np.zeros(60, dtype=np.int64))) == 0
    q.filter.cleanup(later)
    assert all(x.kind == MIX64 for x in q.filter.layers)
    assert PrincipalQuota.from_bytes(q.to_bytes(), QuotaSettings()).to_bytes() == q.to_bytes()
