"""Grouping principals in the stateful operator (pidquota.state.buckets), and keeping each
principal as its own state entry (pidquota.state.layout=principals), change nothing but
speed: decisions, metrics and evictions are those of one group per principal. Metrics carry
each principal's admitted_total since its state began, so an eviction a batch early or late
shows there."""

from test_enforcer_query import MIN, ev

QUOTAS = {"<default>": 3, "User:p1": 1}
SETTINGS = {"producer.id.quota.window.size.seconds": "60", "pidquota.watermark.delay.ms": "0"}


def traffic():
    """Five batches over 12 principals: bursts that throttle, idle gaps that evict
    (W = 60 s), principals that come back, and a late event. The last two run
    back to back, so principals idle in the last one are due while their group
    (with buckets) has events: eviction on the data path, not only on timeouts."""
    users = [f"User:p{i}" for i in range(12)]
    a = [ev(t * 1000, u, 100 * i + t % 5) for i, u in enumerate(users) for t in range(8)]
    b = [ev(10 * MIN + t * 500, u, 100 * i + 50 + t) for i, u in enumerate(users[:5]) for t in range(6)]
    c = [ev(11 * MIN + t, u, 100 * i + t % 3) for i, u in enumerate(users) for t in range(4)]
    c.append(ev(5 * MIN, users[0], 999))  # late: judged at the principal's own time
    d = [ev(30 * MIN + t, u, 7) for u in users[6:] for t in range(2)]
    e = [ev(31 * MIN + t, u, 8) for u in users[9:] for t in range(2)]
    return [a, b, c, d, e]


def run(make_enforcer, tmp, buckets, layout="groups"):
    settings = {**SETTINGS, "pidquota.state.buckets": str(buckets), "pidquota.state.layout": layout}
    runner = make_enforcer(tmp, QUOTAS, **settings)
    *first, d, e = traffic()
    for events, name in zip(first, "abc", strict=True):
        runner.run(events, name)
    out = runner.run_batches([d, e], "de")
    rows = [p["stateOperators"][0]["numRowsTotal"] for p in runner.last_progress if p["stateOperators"]]
    return out, rows


def frame(out, kind, key):
    return out[kind].sort_values(key).reset_index(drop=True)


def assert_alike(out, alone, what):
    for kind, key in (
        ("decisions", ["principal", "producer_id", "timestamp"]),
        ("metrics", ["principal", "batch_id"]),
    ):
        assert frame(out, kind, key).equals(frame(alone, kind, key)), (what, kind)


def test_every_grouping_decides_and_evicts_alike(spark, make_enforcer, tmp_path):
    alone, rows_alone = run(make_enforcer, tmp_path / "0", 0)
    assert (alone["decisions"].verdict == "THROTTLE").any()
    assert rows_alone[-1] == 6  # those of the last two batches; the six idle since 11 min were evicted
    grouped, rows = run(make_enforcer, tmp_path / "5", 5)  # 12 principals in 5 groups
    assert_alike(grouped, alone, "5 groups")
    assert rows[-1] <= 5
    own, _ = run(make_enforcer, tmp_path / "own", 5, "principals")  # an entry per principal
    assert_alike(own, alone, "principals")
    reader = spark.read.format("statestore").option("stateVarName", "quota")
    live = reader.load(str(tmp_path / "own" / "out" / "_ck")).count()  # one row per principal's entry
    assert live == 6  # as above: those idle since 11 min were evicted, on the data path too


def test_the_principals_layout_refuses_a_session_without_rocksdb(spark, make_enforcer, tmp_path):
    import pytest

    from pidquota.conf.errors import ConfigError
    from pidquota.streaming.session import STATE_STORES

    key = "spark.sql.streaming.stateStore.providerClass"
    runner = make_enforcer(tmp_path, QUOTAS, **{"pidquota.state.layout": "principals"})
    spark.conf.set(key, STATE_STORES["hdfs"][key])
    try:
        with pytest.raises(
            ConfigError, match="needs Spark's RocksDB state store .* this session's is HDFSBacked"
        ):
            runner.run([], "none")
    finally:
        spark.conf.set(key, STATE_STORES["rocksdb"][key])
