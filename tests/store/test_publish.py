"""Per-user throttle state in Redis: event time, KIP-447 fencing, bounded calls, outages.

Against a real redis-server; no Spark. Metrics rows come from the real
``quota.PrincipalQuota``, built as ``streaming/operator.py`` builds them.
"""

import logging
import threading
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import redis
from redis.crc import key_slot

from pidquota.conf.errors import ConfigError
from pidquota.quota import PrincipalQuota, QuotaSettings
from pidquota.quota.client import Client
from pidquota.quota.user_state import UserState
from pidquota.store.client import connect
from pidquota.store.decisions import FENCED, MAX_USERS_PER_CALL, OK, DecisionStore, StatusClient
from pidquota.store.keys import Keys
from pidquota.store.quotas import RedisQuotaStore
from pidquota.store.sink import RedisPublisher

W = 3_600_000
SETTINGS = QuotaSettings(window_ms=W)
OLD = 1_600_000_000_000  # 2020-09-13T12:26:40Z: a file replayed years later


class Quotas:
    """A QuotaSource whose quotas the test changes."""

    def __init__(self, quotas: dict) -> None:
        self.quotas, self.stale = dict(quotas), False

    def snapshot(self) -> dict:
        return dict(self.quotas)


def enforce(quota: PrincipalQuota, principal: str, timestamps, pids) -> tuple[dict, list]:
    """The enforcer's metrics row after these events, and its decisions."""
    decisions = quota.observe_batch(np.array(timestamps), np.array(pids), np.full(len(pids), -1))
    m = quota.metrics()
    m["throttle_time_ms"] = round(m["throttle_time_ms"])
    return {"principal": principal, "timestamp": quota.now_ms, **m, "quota_stale": False}, decisions


def unlimited(principal: str, ts: int) -> dict:
    return {"principal": principal, "timestamp": ts, "quota": None, "tokens": None, "rate": None}


def frames(*rows) -> dict:
    """The sink's frames; pandas turns the None of unlimited users into NaN."""
    return {"metrics": pd.DataFrame(list(rows)), "decisions": pd.DataFrame(), "dead-letters": pd.DataFrame()}


@pytest.fixture
def query_id():
    """The query the publisher writes for (the sink binds Spark's StreamingQuery.id)."""
    return "query-1"


def publisher(client, query_id, quotas=None) -> RedisPublisher:
    return RedisPublisher(DecisionStore(client), quotas or Quotas({}), W, query_id)


def test_status_is_in_event_time_and_agrees_with_the_enforcer(redis_client, query_id):
    pub = publisher(redis_client, query_id, Quotas({"User:crash-loop": 100}))
    q = PrincipalQuota(100, SETTINGS, OLD)
    row, decisions = enforce(q, "User:crash-loop", [OLD] * 101, range(101))
    assert decisions[-1].throttle_time_ms == 36_000  # the 101st PID waits W / R
    pub(0, frames(row))
    s = StatusClient(redis_client).status("User:crash-loop")
    assert (s.throttled, s.throttled_for_ms, s.now_ms, s.throttled_until_ms) == (
        True,
        36_000,
        OLD,
        OLD + 36_000,
    )
    assert s.line() == (
        "User:crash-loop: THROTTLED for 36000 ms of event time "
        "(until 2020-09-13T12:27:16.000Z; its latest event 2020-09-13T12:26:40.000Z)"
    )
    assert s.metrics == {
        "quota": 100,
        "tokens": 0,
        "rate": s.metrics["rate"],
        "throttle_time_ms": 36_000,
        "admitted_total": 100,
        "throttled_total": 1,
        "batch_id": 0,
    }
    row, decisions = enforce(q, "User:crash-loop", [OLD + 18_000], [500])  # half a token back
    pub(1, frames(row))
    s = StatusClient(redis_client).status("User:crash-loop")
    assert decisions[-1].throttle_time_ms == s.throttled_for_ms == 18_000 and s.metrics["tokens"] == 0.5
    row, _ = enforce(q, "User:crash-loop", [OLD + 72_000], [501])  # 2 tokens back, one taken
    pub(2, frames(row))
    s = StatusClient(redis_client).status("User:crash-loop")
    assert not s.throttled and s.line().endswith("not throttled (its latest event 2020-09-13T12:27:52.000Z)")


def test_status_names_the_main_client_and_a_batch_of_known_pids_keeps_it(redis_client, query_id):
    pub = publisher(redis_client, query_id, Quotas({"User:crash-loop": 100}))
    q = PrincipalQuota(100, SETTINGS, OLD)
    row, _ = enforce(q, "User:crash-loop", [OLD] * 101, range(101))
    named = row | {"client_id": "123", "client_software": "librdkafka 2.6.1", "broker": "b1"}
    pub(0, frames(named))
    s = StatusClient(redis_client).status("User:crash-loop")
    assert s.client == Client("123", software="librdkafka 2.6.1", broker="b1")  # "123" stays a string
    assert "client_id" not in s.metrics
    assert s.line().endswith("; client.id 123 (librdkafka 2.6.1) via broker b1")
    row, _ = enforce(q, "User:crash-loop", [OLD + 1_000], [5])  # a known PID: no client in its row
    pub(1, frames(row))
    assert StatusClient(redis_client).status("User:crash-loop").client == s.client


def all_hash_values(client) -> list[str]:
    out = []
    for key in client.scan_iter("*"):
        if client.type(key) == b"hash":
            out += [v.decode() for v in client.hgetall(key).values()]
    return out


def test_values_are_rounded_and_no_hash_ever_holds_nan(redis_client, query_id):
    pub = publisher(redis_client, query_id)
    q = PrincipalQuota(7, SETTINGS, OLD)
    row, decisions = enforce(q, "User:r", [OLD] * 7 + [OLD + 1234], range(8))
    assert 0 < row["tokens"] < 0.01 and len(repr(row["tokens"])) > 8  # 0.0023994444...
    odd = {**row, "principal": "User:nan", "rate": float("nan"), "throttle_time_ms": float("nan")}
    pub(0, frames(row, odd, unlimited("User:free", OLD)))
    s = StatusClient(redis_client).status("User:r")
    assert s.metrics["tokens"] == 0.002 and s.throttled_for_ms == decisions[-1].throttle_time_ms == 513_052
    values = all_hash_values(redis_client)
    assert values and not any(v.lower() in ("nan", "inf", "-inf", "none", "<na>") for v in values)
    assert all(len(v.partition(".")[2]) <= 3 for v in values)
    nan_user = redis_client.hgetall(Keys().user_state("User:nan"))
    assert b"rate" not in nan_user and b"throttle_time_ms" not in nan_user and b"tokens" in nan_user
    assert StatusClient(redis_client).principals() == ["User:free", "User:nan", "User:r"]


def test_an_unlimited_users_stale_fields_are_removed(redis_client, query_id):
    pub = publisher(redis_client, query_id)
    row, _ = enforce(PrincipalQuota(2, SETTINGS, OLD), "User:u", [OLD] * 3, range(3))
    pub(0, frames(row))
    assert StatusClient(redis_client).status("User:u").throttled
    pub(1, frames(unlimited("User:u", OLD + 5)))  # its quota was deleted: unlimited now
    fields = redis_client.hgetall(Keys().user_state("User:u"))
    fields.pop(b"published_ms")
    assert fields == {b"now_ms": str(OLD + 5).encode(), b"batch_id": b"1"}
    assert not StatusClient(redis_client).status("User:u").throttled


def test_a_quota_raise_clears_the_throttle_from_the_next_batch(redis_client, query_id):
    quotas = Quotas({"User:up": 2, "User:gone": 2, "User:same": 2})
    pub = publisher(redis_client, query_id, quotas)
    rows = [enforce(PrincipalQuota(2, SETTINGS, OLD), p, [OLD] * 3, range(3))[0] for p in quotas.quotas]
    pub(0, frames(*rows))
    status = StatusClient(redis_client)
    assert all(status.status(p).throttled for p in quotas.quotas)
    quotas.quotas.update({"User:up": 100_000})
    del quotas.quotas["User:gone"]
    pub(1, frames())  # none of them sent anything since
    up = status.status("User:up")
    assert not up.throttled and up.now_ms == OLD
    assert (up.metrics["quota"], up.metrics["tokens"], up.metrics["batch_id"]) == (100_000, 99_998, 1)
    gone = redis_client.hgetall(Keys().user_state("User:gone"))
    assert set(gone) == {b"now_ms", b"batch_id", b"published_ms"} and gone[b"batch_id"] == b"1"
    same = status.status("User:same")
    assert same.throttled and same.metrics["batch_id"] == 0  # unchanged quota: not rewritten
    quotas.quotas["User:up"] = 2  # a cut, but the user is no longer tracked as throttled
    pub(2, frames())
    assert status.status("User:up").metrics["batch_id"] == 1


def test_two_live_writers_on_one_query_the_newer_generation_wins(redis_server, query_id, caplog):
    a = publisher(redis.Redis.from_url(redis_server), query_id)
    b = publisher(redis.Redis.from_url(redis_server), query_id)
    redis.Redis.from_url(redis_server).flushdb()
    row = {"principal": "User:z", "timestamp": OLD, "quota": 10.0, "tokens": 5.0}
    a(0, frames({**row, "admitted_total": 1}))  # the old run: generation 1
    b(0, frames({**row, "admitted_total": 2}))  # a new run of the same query: generation 2
    assert (a.generation, b.generation) == (1, 2)
    with caplog.at_level(logging.WARNING, logger="pidquota.redis"):
        a(100, frames({**row, "admitted_total": 100}))  # the zombie is ahead, and refused
        a(101, frames({**row, "admitted_total": 101}))
        b(5, frames({**row, "admitted_total": 5}))
    assert (a.fenced, b.fenced) == (2, 0)
    assert [r.getMessage() for r in caplog.records] == [
        "query query-1: this writer (generation 1) was fenced off by generation 2, a newer run of the "
        "same query; batch 100 and later are not published by this instance (stop it)"
    ]
    client = redis.Redis.from_url(redis_server)
    assert StatusClient(client).status("User:z").metrics["admitted_total"] == 5
    assert DecisionStore(client).fence_state("query-1") == (2, 5)


def test_fencing_race_between_two_live_writers(redis_server):
    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    stores = {n: DecisionStore(redis.Redis.from_url(redis_server)) for n in "ab"}
    generation = {n: stores[n].begin("race") for n in "ab"}  # b began last
    results = {"a": [], "b": []}

    def writer(name):
        for batch in range(200):
            state = UserState("User:r", OLD, batch, W, admitted_total=batch)
            results[name].append(stores[name].write("race", generation[name], batch, [state]).status)

    threads = [threading.Thread(target=writer, args=(n,)) for n in "ab"]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert set(results["a"]) == {FENCED} and set(results["b"]) == {OK}
    assert DecisionStore(client).fence_state("race") == (2, 199)
    assert StatusClient(client).status("User:r").metrics["admitted_total"] == 199


def test_a_stale_batch_is_refused_and_a_split_batch_applies_in_full(redis_client):
    store = DecisionStore(redis_client)
    g = store.begin("q")
    assert store.write("q", g, 7, [UserState("User:a", OLD, 7, W)]).applied
    assert store.write("q", g, 7, [UserState("User:b", OLD, 7, W)]).applied  # equal: same batch
    assert store.write("q", g, 6, [UserState("User:c", OLD, 6, W)]).status == "STALE"
    assert StatusClient(redis_client).principals() == ["User:a", "User:b"]
    newer = store.begin("q")  # a restart from a restored query_id: the order starts afresh
    assert store.write("q", newer, 3, [UserState("User:d", OLD, 3, W)]).applied
    assert store.write("q", g, 8, [UserState("User:e", OLD, 8, W)]).status == "FENCED"
    assert store.write("other", store.begin("other"), 0, []).applied  # each query has its own fence


def monitored(client, action) -> list[list[str]]:
    """The commands Redis ran during ``action()``, as token lists (principals without spaces)."""
    seen = []
    with client.monitor() as m:
        action()
        client.echo("end-of-test")
        while True:
            cmd = m.next_command()
            if cmd["command"] == "ECHO end-of-test":
                return seen
            seen.append((cmd["client_type"], cmd["command"].split(" ")))


def test_calls_are_bounded_and_declare_every_key_they_touch(redis_server, query_id):
    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    pub = publisher(client, query_id)
    rows = [
        {"principal": f"User:u{i:04d}", "timestamp": OLD + i, "quota": 5, "tokens": 0.5} for i in range(1000)
    ]
    seen = monitored(redis.Redis.from_url(redis_server), lambda: pub(0, frames(*rows)))
    calls, declared, touched = 0, set(), set()
    for kind, tokens in seen:
        if tokens[0] == "EVALSHA":
            n = int(tokens[2])
            assert n <= MAX_USERS_PER_CALL + 2
            calls += 1
            declared |= set(tokens[3 : 3 + n])
        elif kind == "lua":
            touched.add(tokens[1])
    assert calls == 1000 // MAX_USERS_PER_CALL
    assert len(touched) == 1002 and touched <= declared  # 1000 users, the fence, the index
    assert StatusClient(client).status("User:u0999").throttled_for_ms == 360_000
    RedisQuotaStore(client).alter("User:x", {"producer_ids_rate": 1})
    slots = {key_slot(k) for k in client.keys("*")}
    assert len(slots) == 1 and client.exists("{pidquota}:config:generation")  # one slot: cluster-safe


def test_keys_carry_the_prefix_as_a_hash_tag():
    keys = Keys("prod")
    names = [keys.user_config("User:{x}"), keys.user_state("User:a"), keys.fence("q"), keys.config_generation]
    assert all(n.startswith("{prod}:") for n in names) and "{x}" not in names[0]
    for bad in ("a{b", "a}b", "{prod}"):
        with pytest.raises(ConfigError, match="pidquota.redis.prefix"):
            Keys(bad)


@pytest.mark.redis
def test_an_outage_never_stops_publishing_and_catches_up_with_the_newest_state(tmp_path, query_id, caplog):
    from harness.redis import start_redis

    proc, port = start_redis(tmp_path)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        pub = publisher(connect(url, timeout_s=0.5), query_id, Quotas({"<default>": 10}))
        row = {"timestamp": OLD, "quota": 10.0, "tokens": 5.0}
        silent = {
            "timestamp": OLD,
            "quota": 10.0,
            "tokens": 0.2,
            "principal": "User:silent",
            "admitted_total": 10,
        }
        pub(0, frames(silent, *({**row, "principal": f"User:{u}", "admitted_total": 0} for u in "abcde")))
        proc.terminate()
        proc.wait()
        with caplog.at_level(logging.WARNING, logger="pidquota.redis"):
            for batch in range(1, 21):  # each batch has news of one user
                user = "abcde"[batch % 5]
                pub(batch, frames({**row, "principal": f"User:{user}", "admitted_total": batch}))
        assert (pub.failed_publishes, pub.stale) == (20, True)
        assert len(caplog.records) == 1 and "cannot publish throttle state to Redis" in caplog.text
        caplog.clear()
        proc, _ = start_redis(tmp_path, port=port)  # back, and empty
        with caplog.at_level(logging.WARNING, logger="pidquota.redis"):
            pub(21, frames({**row, "principal": "User:a", "admitted_total": 21}))
            pub(22, frames())
        assert [r.getMessage() for r in caplog.records] == [
            "Redis is back: throttle state is published again after 20 failed publish(es); caught up 6 user(s)"
        ]
        assert (pub.failed_publishes, pub.stale) == (20, False)
        status = StatusClient(connect(url))
        newest = {u: status.status(f"User:{u}").metrics["admitted_total"] for u in "abcde"}
        assert newest == {"a": 21, "b": 16, "c": 17, "d": 18, "e": 19}
        assert status.status("User:silent").throttled  # throttled, silent, and Redis came back empty
        assert DecisionStore(connect(url)).fence_state("query-1") == (1, 22)
    finally:
        proc.terminate()
        proc.wait()


def test_an_unbound_publisher_is_an_error_not_an_outage(redis_client):
    from pidquota.conf.errors import PidquotaError

    pub = RedisPublisher(DecisionStore(redis_client), Quotas({}), W)
    with pytest.raises(PidquotaError, match="not bound to a streaming query"):
        pub(0, frames())
    pub.bind("query-2")
    pub(0, frames())
    assert DecisionStore(redis_client).fence_state("query-2") == (1, 0)


def test_status_of_an_unknown_user(redis_client):
    s = StatusClient(redis_client).status("User:nobody")
    assert (s.throttled, s.throttled_for_ms, s.now_ms, s.metrics) == (False, 0, None, {})
    assert s.line() == "User:nobody: no state published"


def test_published_state_expires_in_wall_clock_time_so_a_stopped_run_throttles_no_one(redis_client, query_id):
    """Throttle state is in event time; only its expiry is wall-clock: published_ms on each
    hash, and a TTL on it and on the index, renewed by every publish of that user."""
    wall = [1_700_000_000.0]
    store = DecisionStore(redis_client, ttl_ms=600_000, clock=lambda: wall[0])
    pub = RedisPublisher(store, Quotas({}), W, query_id)
    row, _ = enforce(PrincipalQuota(2, SETTINGS, OLD), "User:x", [OLD] * 3, range(3))
    pub(0, frames(row))
    s = StatusClient(redis_client).status("User:x")
    assert s.throttled and s.published_ms == 1_700_000_000_000 and 590_000 < s.expires_in_ms <= 600_000
    assert 590_000 < redis_client.pttl(Keys().state_index) <= 600_000
    assert replace(s, expires_in_ms=545_000).published(1_700_000_042_000) == (
        "published 2023-11-14T22:13:20.000Z (42 s ago, wall clock); "
        "gone in 9 min 5 s unless the enforcer publishes it again"
    )
    store.ttl_ms = 50  # the run stops publishing; 50 ms later
    pub(1, frames(row))
    time.sleep(0.2)
    gone = StatusClient(redis_client).status("User:x")
    assert not gone.throttled and gone.now_ms is None and gone.line() == "User:x: no state published"
    assert StatusClient(redis_client).principals() == []


def test_the_state_ttl_is_a_setting_and_cannot_lapse_between_batches(redis_server):
    from pidquota.conf.loader import load
    from pidquota.store.quotas import quota_source

    _, pub = quota_source(load(overrides={"pidquota.redis.url": redis_server}))
    assert pub.store.ttl_ms == 600_000  # the default: ten minutes
    short = {"pidquota.redis.url": redis_server, "pidquota.redis.state.ttl.ms": "5000"}
    with pytest.raises(
        ConfigError, match=r"ttl.ms=5000 is less than 3 trigger intervals .* at least 6000, or 0"
    ):
        quota_source(load(overrides=short))
    _, pub = quota_source(load(overrides={**short, "pidquota.redis.state.ttl.ms": "0"}))
    assert pub.store.ttl_ms == 0
