"""Shadow mode and replayed rows, as Redis and the files see them (a real query, a real Redis)."""

from __future__ import annotations

import json

from pidquota.streaming.outputs.reader import read_output

PRINCIPAL = "User:crash-loop"
T0 = 1_767_225_600_000


def run(spark, tmp, client, events, mode="enforce", replay_until=None):
    from pidquota.conf.loader import load
    from pidquota.quota import QuotaSettings, StaticQuotas
    from pidquota.store.decisions import DecisionStore
    from pidquota.store.sink import RedisPublisher
    from pidquota.streaming import query as q
    from pidquota.streaming.outputs.sink import JsonlSink

    config = load(environ={}, overrides={"pidquota.spark.shuffle.partitions": "2"})
    quotas = StaticQuotas({PRINCIPAL: 3})
    inp, out = tmp / "in", tmp / "out"
    inp.mkdir(parents=True)
    for k, batch in enumerate(events):  # one file, one batch
        (inp / f"{k:02d}.jsonl").write_text("\n".join(json.dumps(e) for e in batch) + "\n")
    window_ms = QuotaSettings.from_config(config).window_ms
    publisher = RedisPublisher(DecisionStore(client, shadow=mode == "shadow"), quotas, window_ms)
    sink = JsonlSink(out, publish=publisher, mode=mode, replay_until=replay_until)
    frame = q.enforcer(
        q.file_source(spark, str(inp), 1, str(out / "_ck")), config, quotas, replay_until=replay_until
    )
    q.start(frame, sink, str(out / "_ck"), True, 0).awaitTermination()
    return {k: read_output(out, k) for k in ("decisions", "metrics")}


def burst(t, first_pid, n=5):
    return [{"timestamp": t, "principal": PRINCIPAL, "producer_id": first_pid + i} for i in range(n)]


def test_shadow_publishes_only_under_its_own_keys(spark, tmp_path, redis_client):
    from pidquota.store.decisions import StatusClient

    out = run(spark, tmp_path, redis_client, [burst(T0, 0)], mode="shadow")
    assert list(out["decisions"].verdict) == ["ADMIT"] * 3 + ["THROTTLE"] * 2
    assert (out["decisions"]["mode"] == "shadow").all() and (out["metrics"]["mode"] == "shadow").all()
    assert StatusClient(redis_client).principals() == []  # where brokers look: nothing
    assert not redis_client.keys("{pidquota}:users*") and not redis_client.keys("{pidquota}:fence*")
    shadow = StatusClient(redis_client, shadow=True)
    assert shadow.principals() == [PRINCIPAL] and shadow.status(PRINCIPAL).throttled


def test_replayed_rows_are_written_but_never_published(spark, tmp_path, redis_client):
    from pidquota.store.decisions import StatusClient

    takeover = T0 + 60_000
    out = run(spark, tmp_path, redis_client, [burst(T0, 0)], replay_until=takeover)
    assert out["decisions"].replay.all() and out["metrics"].replay.all()
    assert "THROTTLE" in set(out["decisions"].verdict)
    assert StatusClient(redis_client).principals() == []  # the throttles of the replay stay in the files

    again = run(
        spark, tmp_path / "2", redis_client, [burst(T0, 0), burst(takeover, 100)], replay_until=takeover
    )
    enforced = again["decisions"][~again["decisions"].replay.astype(bool)]
    assert set(enforced.producer_id) == set(range(100, 105))
    status = StatusClient(redis_client).status(PRINCIPAL)
    assert status.throttled and status.now_ms == takeover  # published from the take-over on
