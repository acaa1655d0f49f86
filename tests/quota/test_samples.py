import pytest

from pidquota.quota import SampledStats

H = 3_600_000


def test_documented_example_rate_per_window():
    s = SampledStats(11, H)
    for _ in range(30):
        s.record_admit(10 * 60_000)
    for _ in range(30):
        s.record_admit(70 * 60_000)
    # 60 admitted over 110 minutes of samples, per hour
    assert s.rate(120 * 60_000) == pytest.approx(60 / 110 * 60)


def test_rate_floors_elapsed_at_one_window():
    s = SampledStats(11, H)
    for _ in range(100):
        s.record_admit(0)
    assert s.rate(60_000) == 100


def test_old_samples_are_dropped():
    s = SampledStats(2, 1000)
    s.record_admit(0)
    s.record_admit(1500)
    assert s.rate(1600) == pytest.approx(2 * 1000 / 1600)
    assert s.rate(10_000) == 0.0


def test_average_throttle_time_and_round_trip():
    s = SampledStats(11, H)
    s.record_throttle(0, 1000)
    s.record_throttle(5, 3000)
    assert s.avg_throttle_ms(10) == 2000
    t = SampledStats(11, H)
    t.load(memoryview(s.to_bytes()), 0)
    assert t.samples == s.samples
