import pytest

from pidquota.bloom import MIN_LAYER_CAPACITY, LayeredBloomFilter, TimestampedBloomFilter, layer_capacity
from pidquota.bloom.hashing import MIX64
from pidquota.conf.errors import CorruptStateError

W = 3_600_000  # 1 h
SPAN = W // 4


def make(layers=4, fpr=0.01):
    return LayeredBloomFilter(W, layers, fpr)


def test_layer_sizing_matches_the_documented_worked_example():
    layer = TimestampedBloomFilter(100, 0.01, 0)
    assert layer.shape == (MIX64, 7, 137)
    assert layer.num_bits == 959


def test_capacity_is_the_quota_with_a_floor():
    assert layer_capacity(100) == 100
    assert layer_capacity(0.5) == MIN_LAYER_CAPACITY
    assert layer_capacity(100.2) == 101


def test_added_pid_is_contained_and_unknown_pid_is_not():
    f = make()
    f.add(42, 0, 100)
    assert f.contains(42, 0)
    assert not f.refresh(43, 0, 100)
    assert f.refresh(42, 1000, 100)


def test_new_layer_every_span_of_event_time():
    f = make()
    f.add(1, 0, 100)
    f.add(2, SPAN - 1, 100)
    assert len(f) == 1
    f.add(3, SPAN, 100)
    assert len(f) == 2
    assert f.layers[-1].created_ms == SPAN


def test_full_layer_rolls_over_early():
    f = make()
    for pid in range(MIN_LAYER_CAPACITY + 1):
        f.add(pid, 0, MIN_LAYER_CAPACITY)
    assert len(f) == 2
    assert all(f.contains(pid, 0) for pid in range(MIN_LAYER_CAPACITY + 1))


def test_pid_forgotten_no_earlier_than_window_after_last_sighting():
    f = make()
    f.add(7, 0, 100)
    f.add(99, SPAN - 1, 100)  # keeps the first layer's last insert late
    assert f.contains(7, W)  # last seen 0: still known at exactly W
    # Worst case for "no later than": last insert of its layer was SPAN-1.
    assert f.contains(7, SPAN - 1 + W)
    assert not f.contains(7, SPAN + W)  # gone by W + span


def test_pid_forgotten_at_most_window_plus_span_after_last_sighting():
    for last_seen in (0, 1, SPAN // 2, SPAN - 1):
        f = make()
        f.add(7, 0, 100)
        if last_seen:
            assert f.refresh(7, last_seen, 100)
        # some other PID keeps writing until the end of the first span
        f.add(1000 + last_seen, SPAN - 1, 100)
        assert f.contains(7, last_seen + W)
        assert not f.contains(7, last_seen + W + SPAN)


def test_known_pid_is_refreshed_into_newest_layer_and_never_forgotten():
    f = make()
    f.add(5, 0, 100)
    t = 0
    for _ in range(40):  # ten windows, seen every 15 minutes
        t += SPAN
        assert f.refresh(5, t, 100), t
        f.cleanup(t)
    assert len(f) <= 5
    assert 5 in f.layers[-1]


def test_touching_a_stale_newest_layer_rolls_instead_of_extending_it():
    # PID 1 seen once, PID 2 seen constantly: PID 1 must still be forgotten.
    f = make()
    f.add(1, 0, 100)
    f.add(2, 0, 100)
    t = 0
    while t < 2 * W:
        t += 60_000
        assert f.refresh(2, t, 100)
    assert not f.contains(1, t)
    assert f.contains(2, t)


def test_cleanup_drops_dead_layers_and_empties():
    f = make()
    f.add(1, 0, 100)
    f.add(2, SPAN, 100)
    assert f.cleanup(W + 1) == 1
    assert len(f) == 1
    assert f.cleanup(SPAN + W + 1) == 1
    assert len(f) == 0
    assert f.expires_at_ms() is None


def test_expires_at_is_one_past_the_last_live_instant():
    f = make()
    f.add(1, 5, 100)
    assert f.expires_at_ms() == 5 + W + 1
    assert f.contains(1, 5 + W)
    assert not f.contains(1, f.expires_at_ms())


def test_estimate_count_is_close_for_refreshed_pids():
    f = make()
    for pid in range(80):
        f.add(pid, 0, 100)
    for pid in range(80):  # all refreshed into a second layer
        f.refresh(pid, SPAN, 100)
    assert len(f) == 2
    assert 72 <= f.estimate_count() <= 88


def test_round_trip_preserves_answers_and_times():
    f = make()
    for pid in range(50):
        f.add(pid, pid * 100_000, 100)
    g = LayeredBloomFilter.from_bytes(f.to_bytes())
    assert [(x.created_ms, x.last_insert_ms, x.count) for x in g.layers] == [
        (x.created_ms, x.last_insert_ms, x.count) for x in f.layers
    ]
    now = 49 * 100_000
    assert [g.contains(p, now) for p in range(100)] == [f.contains(p, now) for p in range(100)]
    assert g.to_bytes() == f.to_bytes()
    assert g.size_bytes == len(g.to_bytes())


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda b: b[:10], "shorter than its header"),
        (lambda b: b"XYZ" + b[3:], "magic"),
        (lambda b: b[:3] + bytes([9]) + b[4:], "version 9"),
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\0", "trailing"),
        # the first layer's hash kind is byte 28, its header starts at 29:
        # capacity at +16, error rate at +44
        (lambda b: b[:28] + bytes([7]) + b[29:], "hash kind"),
        (lambda b: b[:45] + (7).to_bytes(8, "little") + b[53:], "does not match its sizing"),
        (lambda b: b[:73] + bytes(8) + b[81:], "invalid"),  # error rate 0.0
    ],
)
def test_corrupt_blobs_raise_a_clear_error(mangle, message):
    f = make()
    f.add(1, 0, 100)
    with pytest.raises(CorruptStateError, match=message):
        LayeredBloomFilter.from_bytes(mangle(f.to_bytes()))


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="layer count"):
        LayeredBloomFilter(W, 0, 0.01)
    with pytest.raises(ValueError, match="false-positive"):
        LayeredBloomFilter(W, 4, 1.5)


def test_configure_drops_layers_dead_under_the_old_window_first():
    minute = 60_000
    f = LayeredBloomFilter(minute, 4, 0.01)  # span 15 s
    f.add(1, 0, 100)
    f.add(2, 50_000, 100)  # a second layer
    assert f.touch_cached(2, 61_000)  # time moves on, no cleanup: PID 1's layer is dead
    assert len(f) == 2 and not f.contains(1, 61_000)
    revived = LayeredBloomFilter.from_bytes(f.to_bytes())
    revived.configure(W, 4, 0.01)  # without now_ms: only the settings change
    assert revived.contains(1, 61_000)
    g = LayeredBloomFilter.from_bytes(f.to_bytes())
    g.configure(W, 2, 0.01, now_ms=61_000)
    assert len(g) == 1 and not g.contains(1, 61_000)
    assert g.contains(2, 61_000 + W) and not g.contains(2, 61_000 + W + 1)
    assert (g.window_ms, g.layer_count, g.span_ms) == (W, 2, W // 2)


@pytest.mark.parametrize("old, new", [(4, 2), (2, 8), (8, 1), (1, 64)])
def test_layer_count_change_keeps_pids_for_the_window_after_their_last_sighting(old, new):
    f = LayeredBloomFilter(W, old, 1e-6)
    for i, t in enumerate(range(0, W, W // 20)):
        f.add(i, t, 100)
    now = W - 1
    g = LayeredBloomFilter.from_bytes(f.to_bytes())
    g.configure(W, new, 1e-6, now_ms=now)
    span = max(W // old, W // new)
    for i, t in enumerate(range(0, W, W // 20)):
        assert g.contains(i, t + W), (i, t)  # never forgotten early
        assert not g.contains(i, t + W + span + 1), (i, t)  # nor kept past W + span
    for t in (now + 1, now + 1 + W // new, now + 1 + 3 * W // new):  # writes follow the new span
        g.add(t, t, 100)
        assert 0 <= t - g.layers[-1].created_ms < W // new
