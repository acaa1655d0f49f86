"""The Bloom layers' bulk hash: the same positions one at a time, and the promised false-positive rate."""

import numpy as np
import pytest

from pidquota.bloom import TimestampedBloomFilter
from pidquota.bloom.hashing import Mix64
from pidquota.bloom.layered import PidHashes


def test_bulk_and_single_positions_agree():
    pids = np.array([0, 1, 7, 2**40 + 3, 2**63 - 1], dtype=np.int64)
    rows = Mix64.many(Mix64.seeds(pids), 7, 137)
    assert rows.tolist() == [list(Mix64.one(p, 7, 137)) for p in pids.tolist()]
    assert all(i * 137 <= x < (i + 1) * 137 for row in rows.tolist() for i, x in enumerate(row))


@pytest.mark.parametrize("capacity, rate", [(100, 0.01), (1000, 0.002), (20_000, 0.01), (5000, 0.1)])
def test_false_positive_rate_at_capacity_is_the_configured_rate(capacity, rate):
    layer = TimestampedBloomFilter(capacity, rate, 0)
    members = np.arange(capacity, dtype=np.int64) * 7919 + 12345  # PIDs are not random
    hashes = PidHashes(members)
    layer.set_positions(hashes.positions(layer, slice(None)), capacity, 0)
    assert hashes.has(layer, slice(None)).all()  # no false negatives
    assert all(int(p) in layer for p in members[:50].tolist())  # one at a time: the same bits
    strangers = np.arange(400_000, dtype=np.int64) + 10**9
    seen = PidHashes(strangers).has(layer, slice(None)).mean()
    # sized for `rate` at `capacity`: the measured rate is within 25% of it (400k probes)
    assert 0.75 * rate <= seen <= 1.25 * rate, seen


def test_membership_in_bulk_equals_one_at_a_time():
    layer = TimestampedBloomFilter(50, 0.3, 0)  # small and loose: many collisions
    for pid in range(0, 100, 2):
        layer.put(layer.positions(pid), 0)
    pids = np.arange(5000, dtype=np.int64)
    assert PidHashes(pids).has(layer, slice(None)).tolist() == [int(p) in layer for p in pids.tolist()]


def test_false_positive_rate_below_capacity_follows_the_theory():
    """65 PIDs in a layer sized for 100: each of the k slices of s bits is filled to
    f = 1 - e^(-65/s), and a stranger passes with probability f^k. Double hashing
    (h1 + i h2) measured about 3x this, since two slices that collide make all collide."""
    layer = TimestampedBloomFilter(100, 0.002, 0)
    _, k, s = layer.shape
    members = np.arange(65, dtype=np.int64) * 1_000_003 + 17
    layer.set_positions(PidHashes(members).positions(layer, slice(None)), 65, 0)
    theory = (1 - np.exp(-65 / s)) ** k
    strangers = np.arange(2_000_000, dtype=np.int64) + 10**12
    seen = PidHashes(strangers).has(layer, slice(None)).mean()
    assert 0.7 * theory <= seen <= 1.35 * theory, (seen, theory)
