import pytest

from quota import TokenBucket

W = 3_600_000


def test_starts_full_and_admits_a_burst_of_r():
    b = TokenBucket(100, W, 0)
    assert b.tokens == 100
    assert [b.try_take(0) for _ in range(100)] == [0] * 100
    assert b.tokens == 0


def test_documented_worked_example_throttle_times_are_exact():
    b = TokenBucket(100, W, 0)
    for _ in range(100):
        b.try_take(0)
    assert b.try_take(0) == 36_000  # ceil(1 / (1/36) * 1000)
    assert b.try_take(18_000) == 18_000  # half a token back
    assert b.try_take(35_999) == 1
    assert b.try_take(36_000) == 0  # one token back: admitted
    assert b.tokens == 0


def test_refill_is_capped_at_capacity():
    b = TokenBucket(10, W, 0)
    b.try_take(0)
    b.refill(10 * W)
    assert b.tokens == 10


def test_throttle_time_formula_matches_the_contract_for_fractional_rates():
    import math

    b = TokenBucket(2.5, 60_000, 0)
    b.try_take(0)
    b.try_take(0)  # 0.5 tokens left
    q = 2.5 / 60  # per second
    assert b.try_take(0) == math.ceil((1 - 0.5) / q * 1000)


def test_at_most_r_plus_q_t_new_pids_in_any_interval():
    r, w = 30, 60_000
    b = TokenBucket(r, w, 0)
    admitted = sum(1 for t in range(0, 120_001, 100) if b.try_take(t) == 0)
    # 120 s: R + Q*t = 30 + 0.5/s * 120 s = 90
    assert admitted == 90


def test_full_at_and_rate_change():
    b = TokenBucket(100, W, 0)
    b.try_take(0)
    assert b.full_at_ms() == 36_000
    b.set_rate(10)
    assert b.tokens == 9  # one spent of 100 is one spent of 10
    b.set_rate(1000)
    assert b.tokens == 999
    for _ in range(999):
        b.try_take(0)
    b.set_rate(5)
    assert b.tokens == 0  # never below empty
    with pytest.raises(ValueError, match="producer_ids_rate"):
        b.set_rate(0)
