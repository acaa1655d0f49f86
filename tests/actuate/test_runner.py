"""actuate/runner.py: which principals a batch's metrics rows throttle, and until when; the run's
actuator built from the settings, in a dry run (no cluster: these tests start nothing)."""

from __future__ import annotations

import pytest

from pidquota.actuate.runner import BatchActuator, cluster_options, describe, throttled_until
from pidquota.conf.errors import ConfigError
from pidquota.conf.loader import load

W = 3_600_000
NOW = 1_900_000_000_000


def _row(principal: str, tokens: float, throttled: int = 0, quota: float = 100.0, **more) -> dict:
    return {
        "principal": principal,
        "timestamp": 1_000,
        "quota": quota,
        "tokens": tokens,
        "throttled": throttled,
        **more,
    }


def test_a_bucket_that_makes_a_new_pid_wait_throttles_until_now_plus_the_wait():
    # 100 PIDs per hour, no token left: the next PID in W / 100 = 36 s
    assert throttled_until([_row("User:crash", 0.0, throttled=12)], W, NOW) == {"User:crash": NOW + 36_000}
    # half a token: 18 s
    assert throttled_until([_row("User:crash", 0.5)], W, NOW) == {"User:crash": NOW + 18_000}


def test_throttled_pids_in_the_batch_count_even_if_the_bucket_refilled_since():
    assert throttled_until([_row("User:crash", 3.0, throttled=1)], W, NOW) == {"User:crash": NOW}


def test_users_within_their_quota_unlimited_users_and_replayed_rows_are_not_throttled():
    rows = [
        _row("User:steady", 40.0),
        _row("User:free", 0.0, quota=0.0),  # no quota: unlimited
        _row("User:old", 0.0, throttled=5, replay=True),
    ]
    assert throttled_until(rows, W, NOW) == {}


def _config(**settings: str):
    return load(None, {"pidquota.actuator": "dry-run", **settings})


def test_a_dry_run_says_what_it_would_do_and_undoes_after_the_hold():
    clock = [NOW / 1000]
    act = BatchActuator(_config(**{"pidquota.actuator.hold.ms": "60000"}), None, clock=lambda: clock[0])
    assert act.dry_run and act.start() == []
    rows = act([_row("User:crash", 0.0, throttled=3), _row("User:ANONYMOUS", 0.0, throttled=3)])
    assert [(r.principal, r.action, r.dry_run) for r in rows] == [
        ("User:ANONYMOUS", "skipped", False),
        ("User:crash", "apply", True),
    ]
    assert rows[0].note == "allow-list"
    assert describe(rows[1]).startswith("would apply quota user=crash request_percentage: absent -> 1 until ")
    assert act.acted == {"User:crash": NOW + 36_000 + 60_000}
    clock[0] += 30
    assert act([_row("User:ANONYMOUS", 0.0, throttled=3)]) == []  # its skip is said once
    clock[0] += 70
    assert [(r.principal, r.action) for r in act([])] == [("User:crash", "undo")]
    assert act.summary() == "1 applied, 1 undone, 1 skipped"


def test_the_cap_skips_the_shortest_throttles_once_each():
    act = BatchActuator(_config(**{"pidquota.actuator.max.principals": "1"}), None, clock=lambda: NOW / 1000)
    rows = act([_row("User:a", 0.0, throttled=1), _row("User:b", 0.5, throttled=1)])
    assert [(r.principal, r.action, r.note) for r in rows] == [
        ("User:b", "skipped", "capped"),
        ("User:a", "apply", ""),
    ]
    assert act([_row("User:a", 0.0, throttled=1), _row("User:b", 0.5, throttled=1)]) == []


def test_deny_writes_names_three_acls():
    act = BatchActuator(
        _config(**{"pidquota.actuator.mechanism": "deny-writes"}), None, clock=lambda: NOW / 1000
    )
    rows = act([_row("User:crash", 0.0, throttled=1)])
    assert [r.control for r in rows] == [
        "acl DENY IDEMPOTENT_WRITE on CLUSTER:kafka-cluster for User:crash",
        "acl DENY WRITE on TOPIC:* for User:crash",
        "acl DENY WRITE on TRANSACTIONAL_ID:* for User:crash",
    ]


def test_the_cluster_is_the_setting_else_the_runs_own_else_a_clear_error():
    config = _config(**{"pidquota.actuator.bootstrap": "kafka://b1,b2:9093"})
    assert cluster_options(config, "x:1")["kafka.bootstrap.servers"] == "b1:9092,b2:9093"
    assert cluster_options(_config(), "x:1")["kafka.bootstrap.servers"] == "x:1"
    with pytest.raises(
        ConfigError, match="none is given: set pidquota.actuator.bootstrap=HOST:PORT, or run with"
    ):
        cluster_options(_config(), None)
    with pytest.raises(ConfigError, match="pidquota.actuator.bootstrap: 'b:0' is not HOST"):
        cluster_options(_config(**{"pidquota.actuator.bootstrap": "b:0"}), None)


@pytest.mark.parametrize(
    "name, value, says",
    [
        ("pidquota.actuator", "yes", "one of off, dry-run, on"),
        ("pidquota.actuator.allow", "admin", "'admin', which is not a principal"),
        ("pidquota.actuator.request.percentage", "0", ">= 0.01"),
    ],
)
def test_a_wrong_actuator_setting_is_refused_naming_it(name, value, says):
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")) as caught:
        load(None, {name: value})
    assert says in str(caught.value)


def test_a_closed_loop_step_that_would_loosen_the_users_quota_is_refused_at_start():
    config = _config(**{"pidquota.actuator.escalation.request.percentage": "1"})
    with pytest.raises(
        ConfigError,
        match=r"escalation.request.percentage = 1 is not below pidquota.actuator.request.percentage = 1",
    ):
        BatchActuator(config, None)
    assert BatchActuator(
        _config(
            **{
                "pidquota.actuator.escalation": "false",
                "pidquota.actuator.escalation.request.percentage": "1",
            }
        ),
        None,
    )
