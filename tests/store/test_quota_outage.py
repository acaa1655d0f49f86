"""A Redis outage is one warning, from the driver, however many Python workers notice it.

The quota reader is pickled to the executors: each Python worker refreshes its own copy,
and each copy used to warn (one warning per worker per outage). Copies are quiet now; the
driver's reader, which ``pidquota run`` refreshes after each batch, warns once when the
outage starts and once when it ends.
"""

import logging
import pickle

import pytest
from harness.redis import start_redis

from pidquota.store.quotas import RedisQuotas, RedisQuotaStore

pytestmark = [pytest.mark.redis]


def test_an_outage_is_one_warning_from_the_driver_not_one_per_worker(tmp_path, caplog):
    import redis

    proc, port = start_redis(tmp_path)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        store = RedisQuotaStore(redis.Redis.from_url(url))
        store.alter("User:a", {"producer_ids_rate": 5})
        driver = RedisQuotas.load(store, url, {}, refresh_ms=0)
        workers = [pickle.loads(pickle.dumps(driver)) for _ in range(3)]  # as Spark ships it
        readers = [driver, *workers]
        with caplog.at_level(logging.DEBUG, logger="pidquota.quotas"):
            for r in readers:
                assert r.snapshot() == {"User:a": 5.0}
            proc.terminate()
            proc.wait(timeout=10)
            for _ in range(2):  # two batches during the outage
                for r in readers:
                    assert r.snapshot() == {"User:a": 5.0} and r.stale  # the last known quotas
            proc, _ = start_redis(tmp_path, port=port)
            store.alter("User:a", {"producer_ids_rate": 5})  # the same generation: not emptied
            for r in readers:
                r.snapshot()
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warned) == 2, warned
        assert warned[0].startswith("Redis unreachable") and warned[1].startswith("Redis is back")
        quiet = [r for r in caplog.records if r.levelno == logging.DEBUG and "unreachable" in r.getMessage()]
        assert len(quiet) == len(workers)  # the workers noticed too, and said so at DEBUG
    finally:
        proc.terminate()
        proc.wait(timeout=10)
