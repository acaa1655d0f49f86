import pytest

from pidquota.quota import TokenBucket

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


def test_documented_worked_example_for_a_rate_below_one_per_window():
    b = TokenBucket(0.5, W, 0)  # B = max(0.5, 1) = 1, Q = 1 per 2 h
    assert b.capacity == 1 and b.tokens == 1
    assert b.try_take(0) == 0  # the first new PID is admitted
    assert b.try_take(0) == 2 * W  # the next waits 2 h, not forever
    assert b.try_take(W) == W  # half a token back after 1 h
    assert b.try_take(2 * W - 1) == 1
    assert b.try_take(2 * W) == 0  # admitted after the announced wait
    assert b.tokens == 0


def test_capacity_is_at_least_one_token():
    assert TokenBucket(0.001, W, 0).capacity == 1
    assert TokenBucket(1, W, 0).capacity == 1
    assert TokenBucket(2.5, W, 0).capacity == 2.5
    b = TokenBucket(0.25, 60_000, 0)
    b.try_take(0)
    b.refill(10 * W)
    assert b.tokens == 1 and b.is_full  # refill stops at one token
    assert b.full_at_ms() == b.last_ms


def test_a_wait_of_36000000_ms_at_a_tenth_of_a_pid_per_hour_is_enough():
    # float credit lands an ulp short of a token here; it still counts as one
    b = TokenBucket(0.1, W, 0)
    b.try_take(0)
    assert b.try_take(0) == 36_000_000
    assert b.try_take(36_000_000) == 0


@pytest.mark.parametrize("seed", range(4))
def test_throttle_time_is_always_a_time_after_which_the_pid_is_admitted(seed):
    import random

    rng = random.Random(seed)
    for _ in range(500):
        rate = rng.choice([0.1, 0.3, 0.7, 1 / 3, 2 / 3, 2.5, 7 / 3, rng.uniform(0.01, 50)])
        window = rng.choice([1, 3, 1000, 60_000, W, 7 * 24 * W, rng.randint(1, 10**7)])
        b = TokenBucket(rate, window, 0)
        now = 0
        for _ in range(10):
            wait = b.try_take(now)
            if wait == 0:
                continue
            for step in sorted(rng.randint(0, wait) for _ in range(rng.randint(0, 10))):
                b.refill(now + step)  # refills in between do not matter
            assert b.try_take(now + wait) == 0, (rate, window, now, wait)
            now += wait


def test_cut_below_one_keeps_what_was_spent():
    b = TokenBucket(100, W, 0)
    b.try_take(0)
    b.set_rate(0.5)
    assert b.tokens == 0  # one spent of 100 is the whole of B = 1
    assert b.try_take(0) == 2 * W
    b.set_rate(100)
    assert b.tokens == 99


def test_window_change_keeps_the_tokens_not_the_credit():
    b = TokenBucket(100, W, 0)
    for _ in range(60):
        b.try_take(0)
    b.set_window(60_000)
    assert b.tokens == 40 and b.window_ms == 60_000
    assert sum(b.try_take(0) == 0 for _ in range(3000)) == 40  # no burst
    assert b.try_take(0) == 600  # refill is now 100 a minute
    b.set_window(W)
    assert b.tokens == 0 and b.try_take(0) == 36_000


def test_window_change_rounds_integer_credit_down():
    b = TokenBucket(7, 3_600_000, 0)
    b.try_take(0)
    b.refill(1)  # credit 6 * 3600000 + 7
    b.set_window(60_000)
    assert isinstance(b.credit, int)
    assert b.credit == 6 * 60_000  # 7 / 60 of a ms of credit is not gained
    with pytest.raises(ValueError, match="window"):
        b.set_window(0)
