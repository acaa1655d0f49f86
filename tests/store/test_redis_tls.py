"""Redis over TLS (``rediss://`` and ``pidquota.redis.ssl.ca.certs``) against a real
redis-server with a ``tls-port``: quotas read, throttles published, by ``pidquota run``."""

import json

import pytest
from harness.cli import run_cli
from harness.redis import start_redis_tls

from pidquota.store.client import RedisUnavailable, connect
from pidquota.store.decisions import StatusClient
from pidquota.store.quotas import RedisQuotaStore

pytestmark = [pytest.mark.redis]


def test_tls_needs_the_ca_and_says_so(tmp_path):
    proc, port, ca = start_redis_tls(tmp_path)
    try:
        assert connect(f"rediss://127.0.0.1:{port}/0", ssl_ca_certs=str(ca)).ping()
        with pytest.raises(RedisUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            connect(f"rediss://127.0.0.1:{port}/0")  # the system's CAs do not know the test CA
        with pytest.raises(RedisUnavailable, match=f"redis://127.0.0.1:{port}/0"):
            connect(f"redis://127.0.0.1:{port}/0")  # plain text to a TLS port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.e2e
def test_a_run_reads_quotas_and_publishes_throttles_over_tls(tmp_path):
    proc, port, ca = start_redis_tls(tmp_path)
    url = f"rediss://127.0.0.1:{port}/0"
    try:
        client = connect(url, ssl_ca_certs=str(ca))
        RedisQuotaStore(client).alter("User:flood", {"producer_ids_rate": 5})
        events = tmp_path / "events.jsonl"
        events.write_text(
            "".join(
                json.dumps({"timestamp": 1_700_000_000_000 + i, "principal": "User:flood", "producer_id": i})
                + "\n"
                for i in range(50)
            )
        )
        done = run_cli(
            "run", "--input", str(events), "--once", "--output", str(tmp_path / "out"),
            "--quota-store", url, "--set", f"pidquota.redis.ssl.ca.certs={ca}",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert "unreachable" not in done.stderr and "cannot publish" not in done.stderr  # no outage
        status = StatusClient(client).status("User:flood")
        assert status.throttled and status.metrics["quota"] == 5
    finally:
        proc.terminate()
        proc.wait(timeout=10)
