"""Redis: quota store, live reload, AUTH, hostile names (writes and status: test_publish.py)."""

import pytest

from pidquota.conf.errors import ConfigError
from pidquota.store.client import RedisUnavailable, connect, redacted
from pidquota.store.keys import Keys, desanitize, sanitize
from pidquota.store.quotas import RedisQuotas, RedisQuotaStore

HOSTILE = [
    "User:alice",
    "User:a:b",
    "User:*",
    "<default>",
    "User:<default>",
    "User:{tag}",
    "User:with space",
    "User:new\nline",
    "User:%41",
    "User:ünï",
    "User:x:config:users:User:y",
]


def test_names_are_sanitised_reversibly_and_never_collide():
    names = {sanitize(n) for n in HOSTILE}
    assert len(names) == len(HOSTILE)
    assert all(desanitize(sanitize(n)) == n for n in HOSTILE)
    assert sanitize("<default>") == "<default>" and sanitize("User:<default>") != "<default>"
    assert all(":" not in sanitize(n) and " " not in sanitize(n) for n in HOSTILE if n != "<default>")


def test_quota_round_trip_with_hostile_names(redis_client):
    store = RedisQuotaStore(redis_client)
    for i, name in enumerate(HOSTILE):
        store.alter(name, {"producer_ids_rate": i + 1})
    assert store.snapshot() == {name: i + 1 for i, name in enumerate(HOSTILE)}
    assert store.entities() == sorted(HOSTILE)
    keys = {k.decode() for k in redis_client.keys("{pidquota}:config:users:*")}
    assert len(keys) == len(HOSTILE)  # one hash each, no entity reached another's key


def test_alter_validates_and_delete_removes(redis_client):
    store = RedisQuotaStore(redis_client)
    for bad in (-1, 0, "x"):
        with pytest.raises(ConfigError, match="must be a positive number"):
            store.alter("User:a", {"producer_ids_rate": bad})
    with pytest.raises(ConfigError, match="Invalid config"):
        store.alter("User:a", {"producer_byte_rate": 5})
    assert store.alter("User:a", delete=["producer_ids_rate"]) == ["producer_ids_rate"]  # no change
    v0 = store.version()
    store.alter("User:a", {"producer_ids_rate": 5})
    assert store.alter("User:a", delete=["producer_ids_rate"]) == []
    assert store.describe("User:a") == {} and store.entities() == [] and store.version() == v0 + 2


@pytest.mark.redis
def test_enforcer_reader_reloads_only_on_change_and_survives_redis_outage(tmp_path):
    from harness.redis import start_redis

    proc, port = start_redis(tmp_path)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        store = RedisQuotaStore(connect(url))
        store.alter("User:a", {"producer_ids_rate": 10})
        reader = RedisQuotas(url, {}, "pidquota", store.snapshot(), store.version(), refresh_ms=0)
        assert reader.snapshot() == {"User:a": 10}
        store.alter("User:a", {"producer_ids_rate": 20})
        assert reader.snapshot() == {"User:a": 20} and not reader.stale
        proc.terminate()
        proc.wait()
        assert reader.snapshot() == {"User:a": 20}  # last known quotas stay in force
        assert reader.stale
        proc, _ = start_redis(tmp_path, port=port)
        RedisQuotaStore(connect(url)).alter(
            "User:a", {"producer_ids_rate": 30}
        )  # the restarted Redis is empty
        assert reader.snapshot() == {"User:a": 30} and not reader.stale
    finally:
        proc.terminate()
        proc.wait()


def test_reader_checks_redis_at_most_every_refresh_interval(redis_client, redis_server):
    store = RedisQuotaStore(redis_client)
    store.alter("User:a", {"producer_ids_rate": 1})
    reader = RedisQuotas(redis_server, {}, "pidquota", store.snapshot(), store.version(), refresh_ms=60_000)
    reader.snapshot()
    store.alter("User:a", {"producer_ids_rate": 2})
    assert [reader.snapshot()["User:a"] for _ in range(100)] == [1] * 100  # cached: no per-event reads


@pytest.mark.redis
def test_auth_with_password_and_acl_user(tmp_path):
    from harness.redis import start_redis

    acl = ("--requirepass", "hunter2", "--user", "pq", "on", ">s3cret", "~{pidquota}:*", "+@all")
    proc, port = start_redis(tmp_path, *acl)
    try:
        url = f"redis://127.0.0.1:{port}/0"
        with pytest.raises(RedisUnavailable) as no_auth:
            connect(url)
        assert "hunter2" not in str(no_auth.value)
        assert connect(url, password="hunter2").ping()
        client = connect(url, username="pq", password="s3cret")
        RedisQuotaStore(client).alter("User:a", {"producer_ids_rate": 3})
        with pytest.raises(RedisUnavailable) as wrong:
            connect(f"redis://pq:nope@127.0.0.1:{port}/0")
        assert "nope" not in str(wrong.value) and "***" in str(wrong.value)
    finally:
        proc.terminate()
        proc.wait()


def test_redacted_urls():
    assert redacted("redis://u:p@h:1/0") == "redis://***@h:1/0"
    assert redacted("rediss://h:1/0") == "rediss://h:1/0"
    with pytest.raises(Exception, match="not a Redis URL"):
        connect("http://x")


def test_key_prefix_is_validated():
    with pytest.raises(ValueError, match="prefix"):
        Keys("bad prefix")
