"""KIP-730 blocks: never overlapping, never stale, fully audited, in every store."""

import multiprocessing

import pytest

from pidquota.traffic.blocks import (
    BLOCK_SIZE,
    FileBlockStore,
    MemoryBlockStore,
    RedisBlockStore,
    StaleBrokerEpochError,
    UnknownBrokerError,
)


@pytest.fixture(params=["memory", "file", pytest.param("redis", marks=pytest.mark.redis)])
def store(request, tmp_path):
    if request.param == "memory":
        return MemoryBlockStore()
    if request.param == "file":
        return FileBlockStore(tmp_path / "blocks.json")
    return RedisBlockStore(request.getfixturevalue("redis_client"))


def assert_disjoint(blocks):
    ranges = sorted((b.start, b.block_end) for b in blocks)
    for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False):
        assert start > end, ranges


def test_blocks_are_sequential_disjoint_and_audited(store):
    e0, e1 = store.register_broker(0), store.register_broker(1)
    got = [store.allocate(0, e0), store.allocate(1, e1), store.allocate(0, e0)]
    assert [b.start for b in got] == [0, 1000, 2000]
    assert all(b.length == BLOCK_SIZE and b.block_end == b.start + 999 for b in got)
    assert store.history() == got
    assert [(b.broker_id, b.broker_epoch) for b in store.history()] == [(0, e0), (1, e1), (0, e0)]


def test_stale_and_unknown_broker_epochs_are_refused(store):
    old = store.register_broker(3)
    new = store.register_broker(3)  # the broker restarted
    assert new == old + 1
    with pytest.raises(
        StaleBrokerEpochError,
        match=f"STALE_BROKER_EPOCH: broker 3 sent epoch {old}, registered epoch is {new}",
    ):
        store.allocate(3, old)
    with pytest.raises(UnknownBrokerError, match="broker 9 has not registered"):
        store.allocate(9, 0)
    assert store.history() == []  # a refused request hands nothing out
    assert store.allocate(3, new).start == 0


def test_file_store_survives_restarts(tmp_path):
    path = tmp_path / "b.json"
    first = FileBlockStore(path)
    epoch = first.register_broker(0)
    a = first.allocate(0, epoch)
    second = FileBlockStore(path)  # the generator restarted
    assert second.register_broker(0) == epoch + 1
    b = second.allocate(0, epoch + 1)
    assert b.start == a.block_end + 1
    assert second.history() == [a, b]


def _file_worker(path, broker, n):
    store = FileBlockStore(path)
    epoch = store.register_broker(broker)
    return [store.allocate(broker, epoch).start for _ in range(n)]


def _redis_worker(url, broker, n):
    import redis

    store = RedisBlockStore(redis.Redis.from_url(url))
    epoch = store.register_broker(broker)
    return [store.allocate(broker, epoch).start for _ in range(n)]


def test_concurrent_allocators_never_overlap_file(tmp_path):
    path = str(tmp_path / "blocks.json")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        starts = sum(pool.starmap(_file_worker, [(path, b, 25) for b in range(4)]), [])
    assert sorted(starts) == list(range(0, 100 * BLOCK_SIZE, BLOCK_SIZE))
    history = FileBlockStore(path).history()
    assert len(history) == 100
    assert_disjoint(history)


def test_concurrent_allocators_never_overlap_redis(redis_server, redis_client):
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        starts = sum(pool.starmap(_redis_worker, [(redis_server, b, 50) for b in range(4)]), [])
    assert sorted(starts) == list(range(0, 200 * BLOCK_SIZE, BLOCK_SIZE))
    history = RedisBlockStore(redis_client).history()
    assert len(history) == 200 and sorted(b.start for b in history) == sorted(starts)
    assert_disjoint(history)
