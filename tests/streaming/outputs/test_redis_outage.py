"""Redis goes away under a running query with publishing on, and comes back empty
(issue 9, items 1 and 2). The query must keep running and keep enforcing the
last known quotas, say so in its metrics rows, warn once when the outage starts
and once when it ends, catch up the published state, and go live again once an
operator re-applies the quotas."""

from __future__ import annotations

import logging
import time

import pytest
from harness.enforcer import write_events
from harness.redis import start_redis

from pidquota.streaming.outputs.reader import read_output

pytestmark = [pytest.mark.redis]

PRINCIPAL = "User:o"


def test_query_survives_redis_stopping_and_coming_back_empty(spark, tmp_path, caplog):
    import redis

    from pidquota.conf.loader import load
    from pidquota.quota import QuotaSettings
    from pidquota.store.decisions import DecisionStore, StatusClient
    from pidquota.store.quotas import RedisQuotas, RedisQuotaStore
    from pidquota.store.sink import RedisPublisher
    from pidquota.streaming import query as q
    from pidquota.streaming.outputs.sink import JsonlSink

    proc, port = start_redis(tmp_path)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_timeout=1)
    store = RedisQuotaStore(client)
    store.alter(PRINCIPAL, {"producer_ids_rate": 3})
    quotas = RedisQuotas.load(store, url, {}, refresh_ms=50)
    config = load(environ={}, overrides={"pidquota.spark.shuffle.partitions": "2"})
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    window_ms = QuotaSettings.from_config(config).window_ms
    publisher = RedisPublisher(DecisionStore(client), quotas, window_ms)
    frame = q.enforcer(q.file_source(spark, str(inp), 0, str(out / "_ck")), config, quotas)
    query = q.start(frame, JsonlSink(out, publish=publisher), str(out / "_ck"), False, 200)
    now = int(time.time() * 1000)

    def feed(name: str, pids) -> dict:
        write_events(
            inp / f"{name}.jsonl",
            [{"timestamp": now, "principal": PRINCIPAL, "producer_id": p} for p in pids],
        )
        query.processAllAvailable()
        assert query.isActive, query.exception()
        m = read_output(out, "metrics")
        d = read_output(out, "decisions")
        return {"metrics": m.iloc[-1], "verdicts": list(d[d.producer_id.isin(list(pids))].verdict)}

    caplog.set_level(logging.WARNING, logger="pidquota.redis")
    try:
        first = feed("a", range(5))
        assert first["verdicts"] == ["ADMIT"] * 3 + ["THROTTLE"] * 2
        assert StatusClient(client).status(PRINCIPAL).throttled

        proc.terminate()
        proc.wait(timeout=10)
        down = [feed(name, range(10 * i, 10 * i + 3)) for i, name in enumerate(["b", "c", "d"], start=1)]
        for batch in down:  # the last known quota (3), not unlimited: the bucket is still empty
            assert batch["verdicts"] == ["THROTTLE"] * 3
            assert batch["metrics"].quota_stale
        assert [b["metrics"].failed_publishes for b in down] == [1, 2, 3]
        outage = [r for r in caplog.records if r.name == "pidquota.redis"]
        assert len(outage) == 1, [r.getMessage() for r in outage]

        proc, _ = start_redis(tmp_path, port=port)  # back, but empty: no persistence
        back = feed("e", range(50, 53))
        assert back["verdicts"] == ["THROTTLE"] * 3  # an emptied store keeps the last known quotas
        assert back["metrics"].quota_stale and back["metrics"].failed_publishes == 3
        messages = [r.getMessage() for r in caplog.records if r.name == "pidquota.redis"]
        assert len(messages) == 2, messages  # one when it started, one when it ended
        status = StatusClient(client).status(PRINCIPAL)  # caught up with the newest state
        assert status.throttled and status.metrics["throttled_total"] == 14

        store.alter(PRINCIPAL, {"producer_ids_rate": 1000})  # the operator re-applies the quotas
        time.sleep(0.3)
        live = feed("f", range(60, 63))
        assert live["verdicts"] == ["ADMIT"] * 3 and not live["metrics"].quota_stale
    finally:
        query.stop()
        proc.terminate()
        proc.wait(timeout=10)
