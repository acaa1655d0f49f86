"""The simulated cluster: rate-limited allocation, broker restarts, KIP-360 epochs."""

import numpy as np
import pytest

from pidquota.traffic.blocks import MemoryBlockStore, StaleBrokerEpochError
from pidquota.traffic.cluster import (
    Broker,
    Cluster,
    Controller,
    InvalidProducerEpochError,
    TransactionCoordinator,
)


def test_broker_hands_out_its_block_then_asks_for_the_next():
    c = Controller(MemoryBlockStore())
    b = Broker(0, c)
    b.start()
    pids = [b.allocate_pid(0)[0] for _ in range(1001)]
    assert pids == list(range(1001))
    assert [blk.start for blk in b.blocks] == [0, 1000]


def test_restart_bumps_epoch_and_drops_the_rest_of_the_block():
    store = MemoryBlockStore()
    c = Controller(store)
    b = Broker(0, c)
    b.start()
    b.allocate_pid(0)
    old_epoch = b.epoch
    b.start()
    assert b.epoch == old_epoch + 1
    assert b.allocate_pid(1)[0] == 1000  # PIDs 1..999 of the old block are never used
    with pytest.raises(StaleBrokerEpochError):
        c.allocate_producer_ids(0, old_epoch, 2)


def test_allocation_is_rate_limited_by_delaying_the_grant():
    c = Controller(MemoryBlockStore(), blocks_per_s=2, now_ms=0)
    c.register_broker(0)
    grants = [c.allocate_producer_ids(0, 0, 0)[1] for _ in range(4)]
    assert grants == [0, 0, 500, 1000]  # a burst of 2, then one every 500 ms
    assert c.throttled == 2


def test_kip_360_bump_retry_and_fencing():
    broker = Broker(0, Controller(MemoryBlockStore()))
    broker.start()
    tc = TransactionCoordinator()
    pid, epoch, _ = tc.init_producer_id("app-1", broker, 0)
    assert epoch == 0
    assert tc.init_producer_id("app-1", broker, 1, epoch=0)[:2] == (pid, 1)  # bump, same PID
    assert tc.init_producer_id("app-1", broker, 2, epoch=0)[:2] == (pid, 1)  # retry: same epoch back
    assert tc.init_producer_id("app-1", broker, 3, epoch=None)[:2] == (pid, 2)  # new instance fences the old
    with pytest.raises(InvalidProducerEpochError, match="INVALID_PRODUCER_EPOCH"):
        tc.init_producer_id("app-1", broker, 4, epoch=0)
    with pytest.raises(InvalidProducerEpochError):
        tc.check_produce("app-1", 1)  # the zombie's produce request
    tc.check_produce("app-1", 2)
    assert (tc.bumps, tc.retries, tc.fenced) == (2, 1, 2)


def test_leadership_moves_and_failed_brokers_lose_their_partitions():
    c = Cluster(
        Controller(MemoryBlockStore()), 6, np.random.default_rng(1), fail_every_ms=60_000, down_ms=30_000
    )
    before = c.leaders.copy()
    c.advance(60_000, 0)
    down = [b.broker_id for b in c.brokers if not b.alive]
    assert len(down) == 1 and down[0] not in set(c.leaders.tolist())
    assert (c.leaders != before).any()
    epoch = c.brokers[down[0]].epoch
    c.advance(95_000, 0)
    assert c.brokers[down[0]].alive and c.brokers[down[0]].epoch == epoch + 1
