"""``pidquota run --prometheus-port`` scraped by a real Prometheus, queried by its HTTP API.

One generated hour (the default mix at ``--rate 10``, plus two dead letters) is
split into six files and read one file per batch by a long-running
``pidquota run``. A Prometheus scrapes it every second. Once Prometheus has
seen every event counted, the run is stopped and the queries below run.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.dashboard import DASHBOARD, panel_queries
from harness.ports import free_port
from harness.prometheus import Prometheus

from pidquota.cli import main as cli

pytestmark = [pytest.mark.e2e, pytest.mark.prometheus]

FILES = 6
DEAD = ['{"principal": "User:x", "producer_id": "5", "timestamp": 1}', "not json at all"]


def _events(folder: Path) -> int:
    """The generated hour as FILES files, plus the dead letters; returns the line count."""
    raw = folder / "hour.jsonl"
    assert (
        cli.main(
            [
                "generate",
                "--duration",
                "1h",
                "--rate",
                "10",
                "--seed",
                "3",
                "--output",
                str(raw),
                "--blocks",
                str(folder / "blocks.json"),
            ]
        )
        == 0
    )
    lines = raw.read_text().splitlines() + DEAD
    raw.unlink()
    (folder / ".hour.jsonl.summary.json").unlink()
    inputs = folder / "in"
    inputs.mkdir()
    size = -(-len(lines) // FILES)
    for k in range(FILES):
        (inputs / f"part-{k}.jsonl").write_text("\n".join(lines[k * size : (k + 1) * size]) + "\n")
    return len(lines)


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """(Prometheus, events, the run): a run scraped until Prometheus counted all its events."""
    folder = tmp_path_factory.mktemp("prometheus")
    events = _events(folder)
    port = free_port()
    prometheus = Prometheus(folder, [f"127.0.0.1:{port}"])
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pidquota",
            "run",
            "--input",
            str(folder / "in"),
            "--output",
            str(folder / "out"),
            "--prometheus-port",
            str(port),
            "--duration",
            "180s",
            "--set",
            "pidquota.prometheus.host=127.0.0.1",
            "--set",
            "pidquota.max.events.per.trigger=1",
            "--set",
            "pidquota.trigger.interval.ms=1000",
        ],
        stdout=(folder / "run.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    run.log = folder / "run.log"  # read by the tests, written by the run (a pipe could fill up)
    try:
        _wait_for(prometheus, events, run)
        time.sleep(3)  # a few more scrapes, so rate() over the last minute has points after the end
        # The run keeps serving while the tests query: a target that goes away makes its series stale.
        yield prometheus, events, run
    finally:
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=120)
    prometheus.stop()


def _wait_for(prometheus: Prometheus, events: int, run: subprocess.Popen) -> None:
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        if prometheus.value("pidquota_input_events_total") == events:
            return
        if run.poll() is not None:
            pytest.fail(f"pidquota run ended early:\n{run.log.read_text()}")
        time.sleep(1)
    seen = prometheus.value("pidquota_input_events_total")
    pytest.fail(f"Prometheus counted {seen} of {events} events in 150 s")


def test_the_run_says_where_the_metrics_are(scraped):
    _, _, run = scraped
    assert "pidquota: Prometheus metrics at http://127.0.0.1:" in run.log.read_text()


def test_the_crash_loop_is_throttled_and_the_steady_users_are_not(scraped):
    prometheus, _, _ = scraped
    assert prometheus.value('pidquota_producer_ids_throttled_total{user="User:crash-loop"}') > 0
    assert prometheus.value('pidquota_producer_ids_throttled_total{user="User:per-batch"}') > 0
    for user in ("User:steady-orders", "User:steady-payments", "User:txn-ledger"):
        assert prometheus.value(f'pidquota_producer_ids_throttled_total{{user="{user}"}}') == 0, user
        assert prometheus.value(f'pidquota_producer_ids_admitted_total{{user="{user}"}}') > 0, user


def test_per_user_gauges_follow_kip_936(scraped):
    prometheus, _, _ = scraped
    assert prometheus.value('pidquota_producer_ids_quota{user="User:crash-loop"}') == 60
    assert prometheus.value('pidquota_producer_ids_quota{user="User:steady-orders"}') == 200
    assert prometheus.value('pidquota_producer_ids_rate{user="User:crash-loop"}') > 60
    assert prometheus.value('pidquota_producer_ids_tokens{user="User:crash-loop"}') < 1
    assert prometheus.value('pidquota_producer_ids_throttle_time_ms{user="User:crash-loop"}') > 0
    assert prometheus.value('pidquota_producer_ids_throttling{user="User:steady-orders"}') == 0
    assert prometheus.value('pidquota_active_pids_estimate{user="User:steady-orders"}') > 0
    assert prometheus.value('pidquota_state_bytes{user="User:steady-orders"}') > 0


def test_the_query_health(scraped):
    prometheus, events, _ = scraped
    assert prometheus.value("pidquota_last_batch_id") >= FILES - 1
    assert prometheus.value("pidquota_batch_duration_seconds") > 0
    assert prometheus.value("pidquota_event_time_lag_seconds") > 0  # the hour was generated in the past
    assert prometheus.value('pidquota_dead_letters_total{reason="wrong_type"}') == 1
    assert prometheus.value('pidquota_dead_letters_total{reason="not_json"}') == 1
    assert prometheus.value("sum(pidquota_dead_letters_total)") == len(DEAD)
    assert prometheus.value("pidquota_quota_stale") == 0
    assert prometheus.value("pidquota_failed_publishes_total") == 0
    assert prometheus.value("max_over_time(pidquota_input_events_per_second[5m])") > 0
    assert prometheus.value('pidquota_prometheus_users{kind="folded"}') == 0
    assert prometheus.value("pidquota_input_events_total") == events


def test_every_dashboard_panel_has_data(scraped):
    """Each panel's PromQL (docker/grafana/dashboards/pidquota.json), with Grafana's
    variables filled in, returns data from the run."""
    prometheus, _, _ = scraped
    empty = [(title, expr) for title, expr in panel_queries(DASHBOARD) if not prometheus.query(expr)]
    assert not empty, f"panels without data: {empty}"
    assert len(panel_queries(DASHBOARD)) >= 6
