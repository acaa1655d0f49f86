"""State saved under one set of KIP-936 settings and loaded under another.

The bucket keeps its tokens (not its token·ms credit), the filter keeps every
PID at least the new W after its last sighting and forgets nothing it had
already forgotten, and version 1 state still loads."""

import struct
from dataclasses import replace

import pytest

from pidquota.conf.errors import CorruptStateError
from pidquota.quota import ADMIT, THROTTLE, PrincipalQuota, QuotaSettings
from pidquota.quota.enforcer import _HEADER, _HEADER_V1

S = 1000
MIN = 60 * S
HOUR = 60 * MIN
H4 = QuotaSettings(window_ms=HOUR, layer_count=4, false_positive_rate=1e-6)


def restart(q: PrincipalQuota, **changes) -> PrincipalQuota:
    return PrincipalQuota.from_bytes(q.to_bytes(), replace(q.settings, **changes))


def verdicts(q, t, pids):
    return [d.verdict for d in (q.observe(t, p) for p in pids) if d is not None]


def spent(rate, n, settings=H4):
    q = PrincipalQuota(rate, settings)
    assert verdicts(q, 0, range(n)) == [ADMIT] * n
    return q


# -- the bucket ------------------------------------------------------------------
def test_spent_bucket_stays_spent_when_the_window_shrinks():
    q = restart(spent(100, 100), window_ms=MIN)
    assert q.bucket.tokens == 0
    d = q.observe(0, 10_000)
    assert d.verdict == THROTTLE and d.throttle_time_ms == 600  # 100 a minute now
    assert verdicts(q, 0, range(10_001, 13_001)) == [THROTTLE] * 3000  # no burst of 3000
    assert verdicts(q, 600, [10_000, 10_001]) == [ADMIT, THROTTLE]


def test_part_spent_bucket_keeps_its_tokens_across_shrink_and_back():
    q = restart(spent(100, 60), window_ms=MIN)
    assert q.bucket.tokens == 40
    assert verdicts(q, 0, range(1000, 4000)).count(ADMIT) == 40
    back = restart(q, window_ms=HOUR)
    assert back.bucket.tokens == 0
    assert back.observe(0, 5000).throttle_time_ms == 36_000  # 100 an hour again


def test_full_bucket_is_full_under_any_window():
    for window in (MIN, HOUR, 7 * 24 * HOUR):
        q = restart(PrincipalQuota(100, H4), window_ms=window)
        assert q.bucket.tokens == 100 and q.bucket.is_full
        assert verdicts(q, 0, range(3000)).count(ADMIT) == 100


def test_fractional_credit_survives_a_window_change():
    q = spent(0.5, 1)
    q.bucket.refill(HOUR)  # half a token back
    r = restart(q, window_ms=MIN)
    assert r.bucket.tokens == pytest.approx(0.5)
    assert r.observe(HOUR, 1).throttle_time_ms == 60_000  # Q = 0.5 per minute


def test_version_1_state_is_read_in_the_window_in_force():
    q = spent(100, 60)
    blob = q.to_bytes()
    v1 = bytearray(blob[: _HEADER_V1.size] + blob[_HEADER.size :])
    v1[3] = 1
    for window in (HOUR, MIN):
        r = PrincipalQuota.from_bytes(bytes(v1), replace(H4, window_ms=window))
        # v1 credit is token·ms of the window in force, as v1 builds read it
        assert r.bucket.tokens == 40 * HOUR / window
        assert r.admitted_total == 60 and len(r.filter) == 1
    r = PrincipalQuota.from_bytes(bytes(v1), H4)
    assert r.to_bytes() == blob  # and it is saved as version 2


def test_version_2_state_with_a_bad_window_is_refused():
    blob = bytearray(spent(3, 1).to_bytes())
    blob[_HEADER_V1.size : _HEADER.size] = struct.pack("<q", 0)
    with pytest.raises(CorruptStateError, match="window_ms=0"):
        PrincipalQuota.from_bytes(bytes(blob), H4)


# -- the metrics samples ------------------------------------------------------------
def test_samples_of_another_size_are_dropped_and_totals_kept():
    q = spent(100, 30)
    assert restart(q).metrics()["rate"] == 30
    r = restart(q, window_ms=MIN)
    m = r.metrics()
    assert m["rate"] == 0 and m["admitted_total"] == 30
    verdicts(r, 0, [500, 501])
    assert r.metrics()["rate"] == 2 and r.stats.size_ms == MIN


# -- the filter ------------------------------------------------------------------------
def test_a_longer_window_does_not_bring_forgotten_pids_back():
    q = PrincipalQuota(100, replace(H4, window_ms=MIN))  # span 15 s
    verdicts(q, 0, [1])
    verdicts(q, 50 * S, [2])  # a new layer
    verdicts(q, 61 * S, [2])  # refreshed in place: PID 1's layer is dead, not yet freed
    assert not q.filter.contains(1, 61 * S)
    r = restart(q, window_ms=HOUR)
    assert not r.filter.contains(1, 61 * S)
    assert verdicts(r, 62 * S, [1]) == [ADMIT]  # judged as new, as before the restart
    assert r.filter.contains(2, 50 * S + HOUR)


def test_a_shorter_window_forgets_by_the_new_window():
    q = PrincipalQuota(1000, H4)
    verdicts(q, 0, [1])
    verdicts(q, 1000 * S, [2])
    verdicts(q, 2990 * S, [3])
    r = restart(q, window_ms=MIN, layer_count=2)
    assert not r.filter.contains(1, 3000 * S) and not r.filter.contains(2, 3000 * S)
    assert r.filter.contains(3, 2990 * S + MIN)
    assert not r.filter.contains(3, 2990 * S + MIN + 1)
    assert verdicts(r, 3000 * S, [1, 2, 3]) == [ADMIT, ADMIT]


class Memory:
    """When each PID must still be known, and when it must be gone.

    known_until: last sighting + W, while the PID was remembered at each
    restart. gone_by: last sighting + W + the longest span any layer had.
    """

    def __init__(self):
        self.last = {}
        self.known_until = {}

    def see(self, q, t, pids):
        verdicts(q, t, pids)
        for p in pids:
            self.last[p] = t
            self.known_until[p] = t + q.settings.window_ms

    def restart(self, q, now, window_ms):
        for p, t in self.last.items():
            if self.known_until[p] >= now:  # still remembered: the new W applies
                self.known_until[p] = t + window_ms

    def check(self, q, max_span):
        now, w = q.now_ms, q.settings.window_ms
        for p, t in self.last.items():
            if self.known_until[p] >= now:
                assert q.filter.contains(p, now), (p, t, now)
                assert q.filter.contains(p, self.known_until[p]), (p, t, "forgotten early")
            gone = max(now, t + w + max_span + 1)
            assert not q.filter.contains(p, gone), (p, t, gone, "kept too long")


def test_window_and_layer_count_changes_keep_pids_for_the_new_window_and_no_longer():
    mem = Memory()
    q = PrincipalQuota(1000, H4)
    # W = 1 h, 4 layers (span 15 min): 40 PIDs over an hour, 10 of them refreshed
    for t in range(0, HOUR, 90 * S):
        mem.see(q, t, [t // (90 * S)] + ([t // (90 * S) % 10] if t % (5 * MIN) == 0 else []))
    tokens = q.bucket.tokens
    max_span = 15 * MIN
    mem.check(q, max_span)
    plan = [
        (dict(window_ms=MIN, layer_count=2), range(0, 5 * MIN, 5 * S)),  # span 30 s
        (dict(window_ms=HOUR, layer_count=8), range(0, 2 * HOUR, 60 * S)),  # span 7.5 min
        (dict(window_ms=HOUR, layer_count=2), range(0, 2 * HOUR, 45 * S)),  # span 30 min
    ]
    for n, (changes, times) in enumerate(plan, start=1):
        now = q.now_ms
        mem.restart(q, now, changes["window_ms"])
        q = restart(q, **changes)
        assert q.bucket.tokens == pytest.approx(tokens)  # the bucket keeps its tokens
        max_span = max(max_span, changes["window_ms"] // changes["layer_count"])
        mem.check(q, max_span)
        for dt in times:
            t = now + 1 + dt
            mem.see(q, t, [1000 * n + dt // times.step] + [dt // times.step % 7])
        mem.check(q, max_span)
        tokens = q.bucket.tokens
    assert q.settings.layer_count == 2 and q.filter.layer_count == 2
