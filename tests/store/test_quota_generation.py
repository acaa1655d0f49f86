"""An emptied Redis (restarted without persistence) is not a deliberate deletion."""

import logging

import pytest

from pidquota.store.quotas import RedisQuotas, RedisQuotaStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def reader_of(redis_server):
    def make(store: RedisQuotaStore) -> tuple[RedisQuotas, Clock]:
        reader = RedisQuotas.load(store, redis_server, {}, refresh_ms=0)
        reader.clock = clock = Clock()
        return reader, clock

    return make


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "pidquota.quotas"]


def test_alter_sets_a_generation_once_per_store_lifetime(redis_client):
    store = RedisQuotaStore(redis_client)
    assert store.marker() == (0, None)
    store.alter("User:a", {"producer_ids_rate": 1})
    first = store.generation()
    store.alter("User:a", {"producer_ids_rate": 2})
    store.alter("User:a", delete=["producer_ids_rate"])
    assert first and store.marker() == (3, first)
    redis_client.flushall()
    store.alter("User:a", {"producer_ids_rate": 3})
    assert store.marker()[0] == 1 and store.generation() not in (None, first)


def test_an_emptied_store_keeps_the_last_known_quotas_until_they_are_reapplied(
    redis_client, reader_of, caplog
):
    store = RedisQuotaStore(redis_client)
    store.alter("User:a", {"producer_ids_rate": 10})
    store.alter("<default>", {"producer_ids_rate": 5})
    reader, clock = reader_of(store)
    caplog.set_level(logging.WARNING, logger="pidquota.quotas")
    redis_client.flushall()  # a restart without persistence
    for _ in range(50):
        assert reader.snapshot() == {"User:a": 10, "<default>": 5}
    assert reader.stale
    assert len(warnings(caplog)) == 1 and "Redis lost its quota store" in warnings(caplog)[0]
    assert "pidquota configs --alter" in warnings(caplog)[0]
    clock.now += 59
    reader.snapshot()
    assert len(warnings(caplog)) == 1  # at most once a minute
    clock.now += 2
    reader.snapshot()
    assert len(warnings(caplog)) == 2 and reader.stale
    store.alter("User:a", {"producer_ids_rate": 20})  # an operator re-applies
    assert reader.snapshot() == {"User:a": 20} and not reader.stale
    assert warnings(caplog)[2:] == [
        f"Redis quotas were re-applied (generation {store.generation()}): 1 quota(s) live again"
    ]
    clock.now += 120
    reader.snapshot()
    assert len(warnings(caplog)) == 3


def test_a_deliberate_delete_takes_effect(redis_client, reader_of, caplog):
    store = RedisQuotaStore(redis_client)
    store.alter("User:a", {"producer_ids_rate": 10})
    store.alter("<default>", {"producer_ids_rate": 5})
    reader, _ = reader_of(store)
    caplog.set_level(logging.WARNING, logger="pidquota.quotas")
    store.alter("User:a", delete=["producer_ids_rate"])
    assert reader.snapshot() == {"<default>": 5} and not reader.stale
    store.alter("<default>", delete=["producer_ids_rate"])  # the last quota: the store is empty of quotas
    assert reader.snapshot() == {} and not reader.stale
    assert warnings(caplog) == []


def test_a_store_without_quotas_has_none_and_nothing_to_warn_about(redis_client, reader_of, caplog):
    store = RedisQuotaStore(redis_client)
    reader, _ = reader_of(store)
    caplog.set_level(logging.WARNING, logger="pidquota.quotas")
    assert reader.snapshot() == {} and not reader.stale
    store.alter("User:a", {"producer_ids_rate": 4})
    assert reader.snapshot() == {"User:a": 4} and not reader.stale
    assert warnings(caplog) == []
