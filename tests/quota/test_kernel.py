"""The compiled kernel (quota/kernel.py) decides exactly as the contract does one sighting at a time."""

import numpy as np
import pytest
from test_batch import OLD_STATE, case, live_layers, one_at_a_time

from pidquota.quota import PrincipalQuota, QuotaSettings, enforcer, kernel


def test_the_kernel_is_compiled_here():
    """numba is a declared dependency: without it every test below would test the numpy judge.
    Its machine code is cached beside the module, where ``pidquota run`` looks before compiling."""
    assert kernel.available()
    assert kernel.compiled_here()


def _without_kernel(monkeypatch, q: PrincipalQuota, ts, pids, epochs) -> list:
    """``judge_batch`` with the kernel off: the numpy judge, or ``observe`` one at a time."""
    monkeypatch.setattr(enforcer, "use_kernel", False)
    try:
        return q.judge_batch(ts, pids, epochs).rows()
    finally:
        monkeypatch.setattr(enforcer, "use_kernel", True)


def _same_state(a: PrincipalQuota, b: PrincipalQuota) -> None:
    assert (a.now_ms, a.bucket.credit, a.bucket.last_ms) == (b.now_ms, b.bucket.credit, b.bucket.last_ms)
    assert type(a.bucket.credit) is type(b.bucket.credit)
    assert (a.admitted_total, a.throttled_total) == (b.admitted_total, b.throttled_total)
    assert a.stats.samples == b.stats.samples
    assert live_layers(a) == live_layers(b)
    alive = [x for x in a.filter.layers if a.now_ms - x.last_insert_ms <= a.filter.window_ms]
    twins = [x for x in b.filter.layers if b.now_ms - x.last_insert_ms <= b.filter.window_ms]
    assert [x.bits for x in alive] == [x.bits for x in twins]  # the very same bits


@pytest.mark.parametrize("seed", range(80))
def test_the_kernel_decides_as_one_sighting_at_a_time(seed):
    rng, settings, rate, (ts, pids, epochs), replay_until = case(seed)
    fast, single = PrincipalQuota(rate, settings), PrincipalQuota(rate, settings)
    for chunk in np.array_split(np.arange(len(ts)), int(rng.integers(1, 6))):
        shuffled = rng.permutation(chunk)
        got = fast.observe_batch(ts[shuffled], pids[shuffled], epochs[shuffled], replay_until)
        assert got == one_at_a_time(single, ts[chunk], pids[chunk], epochs[chunk], replay_until)
        if rng.random() < 0.5:
            fast = PrincipalQuota.from_bytes(fast.to_bytes(), settings)
            single = PrincipalQuota.from_bytes(single.to_bytes(), settings)
    _same_state(fast, single)


@pytest.mark.parametrize("rate", [1, 7, 100, 2.7, 0.5])
def test_a_flood_in_the_kernel_equals_the_numpy_judge(rate, monkeypatch):
    """Every sighting a new PID (the flood benchmark's shape), batch after batch through the
    state's bytes: the kernel and the numpy judge give the same verdicts and state."""
    settings = QuotaSettings(window_ms=60_000, layer_count=4)
    rng = np.random.default_rng(int(rate * 10))
    fast, slow = PrincipalQuota(rate, settings), PrincipalQuota(rate, settings)
    pid = 0
    for batch in range(12):
        n = int(rng.integers(50, 400))
        ts = np.sort(rng.integers(batch * 10_000, (batch + 1) * 10_000, n))
        pids = np.arange(pid, pid + n) if batch % 3 else rng.integers(0, pid + n, n)  # some repeats
        pid += n
        epochs = np.zeros(n, dtype=np.int64)
        got = fast.judge_batch(ts, pids, epochs).rows()
        assert got == _without_kernel(monkeypatch, slow, ts, pids, epochs)
        fast = PrincipalQuota.from_bytes(fast.to_bytes(), settings)
        slow = PrincipalQuota.from_bytes(slow.to_bytes(), settings)
    _same_state(fast, slow)


def test_state_of_the_old_hash_is_judged_by_the_other_paths():
    """Layers written with pybloom-live's own hash (saved before version 2) are not the
    kernel's: such a state goes the numpy way, and only its new layers are the kernel's."""
    settings = QuotaSettings()
    old = PrincipalQuota.from_bytes(OLD_STATE.read_bytes(), settings)
    assert not kernel.covers(old)
    assert kernel.covers(PrincipalQuota(100, settings))


def test_an_integer_credit_past_what_a_double_holds_is_not_the_kernels():
    q = PrincipalQuota(10**12, QuotaSettings(window_ms=3_600_000))
    assert isinstance(q.bucket.credit, int) and not kernel.covers(q)


def test_without_numba_the_numpy_judge_decides_and_says_so(monkeypatch):
    """A node whose numba cannot be imported (or cannot compile): one warning, and the same
    verdicts from the numpy judge; the stream goes on."""
    import sys

    settings = QuotaSettings(window_ms=60_000)
    ts, pids = np.arange(300), np.arange(300)
    epochs = np.zeros(300, dtype=np.int64)
    want = PrincipalQuota(7, settings).judge_batch(ts, pids, epochs).rows()  # the kernel's
    monkeypatch.setattr(kernel, "_tried", False)
    monkeypatch.setattr(kernel, "_compiled", None)
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    with pytest.warns(RuntimeWarning, match="the numpy judge decides instead"):
        assert not kernel.available()
    assert not kernel.available()  # said once
    assert PrincipalQuota(7, settings).judge_batch(ts, pids, epochs).rows() == want


def test_a_process_loads_the_kernel_only_once_asked_for_enough_sightings(monkeypatch):
    """``kernel.wanted``: the numpy judge until the process has been asked for LOAD_AFTER
    sightings in all; the batch that reaches it loads the kernel, and every one after it is
    judged compiled (a short run never pays numba's import)."""
    loads = []
    monkeypatch.setattr(kernel, "_tried", False)
    monkeypatch.setattr(kernel, "_compiled", None)
    monkeypatch.setattr(kernel, "_asked", 0)
    monkeypatch.setattr(kernel, "LOAD_AFTER", 1_000)
    real = kernel.available
    monkeypatch.setattr(kernel, "available", lambda: loads.append(1) or real())
    assert [kernel.wanted(400), kernel.wanted(400)] == [False, False] and not loads
    assert kernel.wanted(400) and loads == [1]  # 1,200 asked for: loaded, this batch compiled
    assert kernel.wanted(1) and loads == [1]  # loaded once


def test_the_same_verdicts_before_and_after_the_kernel_loads(monkeypatch):
    """A principal's batches judged across the load (numpy, then compiled) decide as the
    numpy judge alone does, and keep the same state bytes."""
    from pidquota.quota import PrincipalQuota, QuotaSettings

    settings, rng = QuotaSettings(), np.random.default_rng(3)
    batches = []
    for k in range(6):
        ts = np.sort(rng.integers(k * 60_000, (k + 1) * 60_000, 500))
        batches.append((ts, rng.integers(0, 700, 500), np.zeros(500, np.int64)))
    outcomes = []
    for load_after in (10**9, 1_200):  # never loaded; loaded at the third batch
        monkeypatch.setattr(kernel, "_tried", False)
        monkeypatch.setattr(kernel, "_compiled", None)
        monkeypatch.setattr(kernel, "_asked", 0)
        monkeypatch.setattr(kernel, "LOAD_AFTER", load_after)
        quota, verdicts = PrincipalQuota(40, settings, 0), []
        for ts, pids, epochs in batches:
            quota = PrincipalQuota.from_bytes(quota.to_bytes(), settings)
            verdicts.append(quota.judge_batch(ts, pids, epochs).admitted.tolist())
        outcomes.append((verdicts, quota.to_bytes(), kernel._compiled is not None))
    assert outcomes[0][2] is False and outcomes[1][2] is True
    assert outcomes[0][:2] == outcomes[1][:2]
