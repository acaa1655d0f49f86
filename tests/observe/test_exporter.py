"""The Prometheus exporter, fed batches directly (no Spark): labels, sums, counters, health."""

from __future__ import annotations

import socket

import pandas as pd
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pidquota.conf.errors import ConfigError
from pidquota.observe.exporter import OTHER, Exporter, UserLabels
from pidquota.streaming.reasons import REASON_CLASSES, reason_class

W = 3_600_000


def metric_row(user, ts, admitted=0, throttled=0, tokens=10.0, quota=60.0, **more):
    row = {
        "principal": user,
        "timestamp": ts,
        "quota": quota,
        "rate": float(admitted),
        "tokens": tokens,
        "throttle_time_ms": 0.0,
        "events": admitted + throttled + 5,
        "admitted": admitted,
        "throttled": throttled,
        "active_pids_estimate": admitted + 3,
        "state_bytes": 1000,
        "quota_stale": False,
        "failed_publishes": 0,
    }
    return {**row, **more}


def frames(rows, dead=()):
    return {
        "decisions": pd.DataFrame(),
        "metrics": pd.DataFrame(rows),
        "dead-letters": pd.DataFrame({"raw": ["x"] * len(dead), "reason": list(dead)}),
    }


def scrape(exporter) -> dict[tuple[str, tuple], float]:
    text = generate_latest(exporter.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


class Clock:
    def __init__(self, t=1_000.0):
        self.t = t

    def __call__(self):
        return self.t


def test_labels_follow_the_worked_example():
    labels = UserLabels(max_users=2)
    assert labels.update([("A", 10, False), ("B", 3, False)]) == (["A", "B"], [])
    assert labels.update([("C", 5, False)]) == ([], [])
    assert labels.label("C") == OTHER
    assert labels.update([("C", 3, False)]) == (["C"], ["B"])
    assert labels.label("B") == OTHER and labels.label("C") == "C"
    assert labels.update([("D", 1, True)]) == (["D"], [])
    assert labels.labelled == {"A", "C", "D"}


def test_a_throttled_user_is_never_demoted():
    labels = UserLabels(max_users=1)
    labels.update([("T", 1, True)])
    labels.update([("big", 1000, False)])
    assert labels.labelled == {"T", "big"}
    labels.update([("bigger", 5000, False)])  # replaces "big", never "T"
    assert labels.labelled == {"T", "bigger"}


def test_per_user_gauges_and_counters():
    ex = Exporter(W, max_users=10, clock=Clock())
    ex.observe_batch(0, frames([metric_row("User:a", 1_000, admitted=4, throttled=2, tokens=0.96)]))
    ex.observe_batch(1, frames([metric_row("User:a", 2_000, admitted=1, tokens=3.0)]))
    s = scrape(ex)
    assert value(s, "pidquota_producer_ids_admitted_total", user="User:a") == 5
    assert value(s, "pidquota_producer_ids_throttled_total", user="User:a") == 2
    assert value(s, "pidquota_producer_ids_tokens", user="User:a") == 3.0
    assert value(s, "pidquota_producer_ids_quota", user="User:a") == 60
    assert value(s, "pidquota_producer_ids_throttling", user="User:a") == 0
    assert value(s, "pidquota_last_batch_id") == 1
    assert value(s, "pidquota_input_events_total") == (6 + 5) + (1 + 5)


def test_throttled_now_follows_the_tokens():
    ex = Exporter(W, max_users=10, clock=Clock())
    ex.observe_batch(0, frames([metric_row("User:a", 1_000, admitted=1, tokens=0.96)]))
    assert value(scrape(ex), "pidquota_producer_ids_throttling", user="User:a") == 1


def test_an_unlimited_user_has_no_quota_series():
    ex = Exporter(W, max_users=10, clock=Clock())
    ex.observe_batch(0, frames([metric_row("User:free", 1_000, admitted=1, tokens=None, quota=None)]))
    s = scrape(ex)
    assert value(s, "pidquota_producer_ids_quota", user="User:free") is None
    assert value(s, "pidquota_producer_ids_admitted_total", user="User:free") == 1


def test_users_past_the_cap_are_summed_into_other_and_counters_never_drop():
    ex = Exporter(W, max_users=2, clock=Clock())
    ex.observe_batch(0, frames([metric_row(f"User:u{i}", 1_000, admitted=10 - i) for i in range(4)]))
    s = scrape(ex)
    assert value(s, "pidquota_producer_ids_admitted_total", user="User:u0") == 10
    assert value(s, "pidquota_producer_ids_admitted_total", user="User:u2") is None
    assert value(s, "pidquota_producer_ids_admitted_total", user=OTHER) == 8 + 7
    assert value(s, "pidquota_active_pids_estimate", user=OTHER) == (8 + 3) + (7 + 3)
    assert value(s, "pidquota_prometheus_users", kind="folded") == 2
    # u3 overtakes u1 (9) by more than twice: u1 is folded, its series end, _other keeps growing
    ex.observe_batch(1, frames([metric_row("User:u3", 2_000, admitted=20)]))
    s = scrape(ex)
    assert value(s, "pidquota_producer_ids_admitted_total", user="User:u3") == 20
    assert value(s, "pidquota_producer_ids_admitted_total", user="User:u1") is None
    assert value(s, "pidquota_producer_ids_admitted_total", user=OTHER) == 8 + 7
    assert value(s, "pidquota_active_pids_estimate", user=OTHER) == (8 + 3) + (9 + 3)
    ex.observe_batch(2, frames([metric_row("User:u1", 3_000, admitted=1)]))
    assert value(scrape(ex), "pidquota_producer_ids_admitted_total", user=OTHER) == 8 + 7 + 1


def test_a_throttled_user_gets_a_label_past_the_cap():
    ex = Exporter(W, max_users=1, clock=Clock())
    ex.observe_batch(0, frames([metric_row("User:big", 1_000, admitted=50)]))
    ex.observe_batch(1, frames([metric_row("User:crash-loop", 1_000, admitted=1, throttled=3, tokens=0.2)]))
    s = scrape(ex)
    assert value(s, "pidquota_producer_ids_throttled_total", user="User:crash-loop") == 3
    assert value(s, "pidquota_producer_ids_admitted_total", user="User:big") == 50


def test_health_lag_rate_dead_letters_stale_and_failed_publishes():
    clock = Clock(1_000.0)
    ex = Exporter(W, max_users=10, clock=clock)
    dead = ["not valid JSON", "field 'producer_id' must be an integer, got \"5\"", "empty record"]
    row = metric_row("User:a", 990_000, admitted=1, quota_stale=True, failed_publishes=2)
    clock.t = 1_010.0
    ex.observe_batch(0, frames([row], dead))
    ex.observe_progress({"batchId": 0, "durationMs": {"triggerExecution": 1500}})
    s = scrape(ex)
    assert value(s, "pidquota_event_time_lag_seconds") == pytest.approx(1_010.0 - 990.0)
    assert value(s, "pidquota_input_events_per_second") == pytest.approx((6 + 3) / 10.0)
    assert value(s, "pidquota_batch_duration_seconds") == 1.5
    assert value(s, "pidquota_dead_letters_total", reason="not_json") == 1
    assert value(s, "pidquota_dead_letters_total", reason="wrong_type") == 1
    assert value(s, "pidquota_dead_letters_total", reason="empty") == 1
    assert value(s, "pidquota_dead_letters_total", reason="out_of_range") == 0
    assert value(s, "pidquota_quota_stale") == 1
    assert value(s, "pidquota_failed_publishes_total") == 2
    ex.observe_batch(1, frames([{**row, "quota_stale": False, "failed_publishes": 3}]))
    s = scrape(ex)
    assert value(s, "pidquota_quota_stale") == 0 and value(s, "pidquota_failed_publishes_total") == 3
    clock.t += 120  # nothing for two minutes: no events per second
    assert value(scrape(ex), "pidquota_input_events_per_second") == 0


def test_the_actuators_actions_are_counted_and_its_principals_read_at_each_scrape():
    ex = Exporter(W, max_users=10)
    acted = {"User:a": 1}
    ex.watch_actuator(lambda: len(acted))
    batch = dict(frames([metric_row("User:a", 1_000, throttled=3)]))
    batch["actions"] = pd.DataFrame({"action": ["apply", "skipped", "apply"]})
    ex.observe_batch(0, batch)
    s = scrape(ex)
    assert value(s, "pidquota_actuator_actions_total", action="apply") == 2
    assert value(s, "pidquota_actuator_actions_total", action="skipped") == 1
    assert value(s, "pidquota_actuator_actions_total", action="undo") == 0
    assert value(s, "pidquota_actuator_principals") == 1
    acted.clear()
    assert value(scrape(ex), "pidquota_actuator_principals") == 0


def test_each_brokers_obedience_is_read_at_each_scrape():
    from pidquota.actuate.obedience import Verdict

    ex = Exporter(W, max_users=10)
    verdicts = [Verdict(1, True, "obeys"), Verdict(2, False, "no report"), Verdict(3, None, "no report yet")]
    ex.watch_plugin(lambda: verdicts)
    s = scrape(ex)
    assert value(s, "pidquota_plugin_broker_obeys", broker="1") == 1
    assert value(s, "pidquota_plugin_broker_obeys", broker="2") == 0
    assert value(s, "pidquota_plugin_broker_obeys", broker="3") is None
    verdicts[1] = Verdict(2, True, "obeys")
    assert value(scrape(ex), "pidquota_plugin_broker_obeys", broker="2") == 1


@pytest.mark.parametrize(
    "reason, cls",
    [
        ("empty record", "empty"),
        ("too many '{' or '[' (more than 64): an event is one flat JSON object", "too_nested"),
        ("not valid JSON", "not_json"),
        ("not valid JSON (text after the object)", "not_json"),
        ("not a JSON object", "not_object"),
        ("missing required field 'principal'", "missing_field"),
        ("field 'principal' must be a string, got 42", "wrong_type"),
        ("field 'producer_id' must be an integer, got 5.0", "wrong_type"),
        ("field 'timestamp' is out of range (0..253402300799999): -5", "out_of_range"),
        ("field 'producer_id' is out of range: a number of more than 1000 digits", "out_of_range"),
        ("principal is empty (only white space or control characters)", "bad_principal"),
        ("principal is longer than 256 characters", "bad_principal"),
        ("something new", "other"),
    ],
)
def test_reason_classes(reason, cls):
    assert reason_class(reason) == cls and cls in REASON_CLASSES


def test_a_port_in_use_names_the_setting_and_the_fix():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"pidquota.prometheus.port {port}.*--prometheus-port"):
            Exporter(W, 10).serve("127.0.0.1", port)


def test_the_endpoint_serves_the_metrics():
    import urllib.request

    ex = Exporter(W, 10)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ex.serve("127.0.0.1", port)
    try:
        ex.observe_batch(0, frames([metric_row("User:a", 1_000, admitted=2)]))
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        ex.close()
    assert 'pidquota_producer_ids_admitted_total{user="User:a"} 2.0' in body
    again = Exporter(W, 10)
    again.serve("127.0.0.1", port)  # closed: the port is free again (a pidquota restart)
    again.close()


def test_a_throttled_user_is_protected_for_a_window_after_its_last_throttle():
    labels = UserLabels(max_users=1, keep_ms=W)
    labels.update([("T", 1, True)], now_ms=0)
    labels.update([("big", 1000, False)], now_ms=W)  # W after T's throttle: still protected
    assert labels.labelled == {"T", "big"}
    labels.update([("bigger", 5000, False)], now_ms=W + 1)  # lapsed: T is the weakest, and goes
    assert labels.labelled == {"big", "bigger"} and not labels.protected


def test_a_quiet_throttled_users_gauge_falls_to_zero_when_its_throttle_ends():
    ex = Exporter(W, max_users=10, clock=Clock())
    # R = 60 per hour, 0.5 tokens at t = 1000: throttled for 30 s of event time
    ex.observe_batch(0, frames([metric_row("User:a", 1_000, admitted=1, tokens=0.5)]))
    assert value(scrape(ex), "pidquota_producer_ids_throttling", user="User:a") == 1
    ex.observe_batch(1, frames([metric_row("User:b", 30_000, admitted=1)]))  # a says nothing
    assert value(scrape(ex), "pidquota_producer_ids_throttling", user="User:a") == 1
    ex.observe_batch(2, frames([metric_row("User:b", 31_000, admitted=1)]))
    assert value(scrape(ex), "pidquota_producer_ids_throttling", user="User:a") == 0


def test_a_replayed_row_neither_counts_nor_protects():
    ex = Exporter(W, max_users=1, clock=Clock())
    ex.observe_batch(0, frames([metric_row("User:big", 1_000, admitted=50)]))
    replayed = metric_row("User:old", 1_000, admitted=0, throttled=0, tokens=0.2, replay=True)
    ex.observe_batch(1, frames([replayed]))
    assert "User:old" not in ex.labels.protected
    assert value(scrape(ex), "pidquota_producer_ids_throttled_total", user="User:old") is None


def test_each_count_says_what_it_counts():
    """The throttled counter counts decisions, not distinct PIDs (issue 35 §3: the demo's crash
    loop had 4,379 THROTTLE decisions on 828 PIDs), and its HELP says so."""
    helps = {f.name: f.documentation for f in Exporter(W, 1).registry.collect()}
    assert helps["pidquota_producer_ids_throttled"].startswith("THROTTLE decisions: ")
    assert "counts again" in helps["pidquota_producer_ids_throttled"]
    assert helps["pidquota_producer_ids_admitted"].startswith("New PIDs admitted (each once")
