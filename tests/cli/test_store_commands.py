"""`pidquota configs` and `pidquota status`, and quotas changed under a running query."""

import pytest
from harness.enforcer import write_events

from pidquota.cli.main import main


def cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out.strip(), out.err.strip()


def test_configs_round_trip_like_kafka_configs(redis_server, redis_client, capsys):
    r = ("--redis", redis_server)
    assert cli(
        capsys,
        "configs",
        *r,
        "--alter",
        "--add-config",
        "producer_ids_rate=50",
        "--entity-type",
        "users",
        "--entity-name",
        "User:alice",
    ) == (0, "Completed updating config for user-principal 'User:alice'.", "")
    assert cli(
        capsys,
        "configs",
        *r,
        "--alter",
        "--add-config",
        "producer_ids_rate=10",
        "--entity-type",
        "users",
        "--entity-default",
    )[1] == ("Completed updating default config for user-principal in the cluster.")
    code, out, _ = cli(capsys, "configs", *r, "--describe", "--entity-type", "users")
    assert out.splitlines() == [
        "Quota configs for the default user-principal are producer_ids_rate=10.0",
        "Quota configs for user-principal 'User:alice' are producer_ids_rate=50.0",
    ]
    assert cli(capsys, "configs", *r, "--describe", "--entity-type", "users", "--entity-name", "User:alice")[
        1
    ] == ("Quota configs for user-principal 'User:alice' are producer_ids_rate=50.0")
    assert cli(capsys, "configs", *r, "--describe", "--entity-type", "users", "--entity-name", "User:bob")[
        1
    ] == ("No quota configs for user-principal 'User:bob'.")
    assert (
        cli(
            capsys,
            "configs",
            *r,
            "--alter",
            "--delete-config",
            "producer_ids_rate",
            "--entity-type",
            "users",
            "--entity-name",
            "User:alice",
        )[0]
        == 0
    )
    assert cli(capsys, "configs", *r, "--describe", "--entity-type", "users", "--entity-name", "User:alice")[
        1
    ] == ("No quota configs for user-principal 'User:alice'.")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--add-config", "producer_ids_rate=-1"], "must be a positive number, got '-1'"),
        (["--add-config", "producer_ids_rate=0"], "must be a positive number, got '0'"),
        (["--add-config", "producer_ids_rate=lots"], "must be a positive number, got 'lots'"),
        (["--add-config", "producer_byte_rate=5"], "Invalid config(s): producer_byte_rate"),
        (["--add-config", "nonsense"], "--add-config expects key=value"),
        (["--delete-config", "producer_byte_rate"], "Invalid config(s): producer_byte_rate"),
    ],
)
def test_invalid_alterations_are_refused(redis_server, redis_client, capsys, args, message):
    code, _, err = cli(
        capsys,
        "configs",
        "--redis",
        redis_server,
        "--alter",
        *args,
        "--entity-type",
        "users",
        "--entity-name",
        "User:z",
    )
    assert code == 2 and message in err


def test_configs_argument_errors(redis_server, capsys, monkeypatch):
    assert (
        "is not supported"
        in cli(capsys, "configs", "--redis", redis_server, "--describe", "--entity-type", "clients")[2]
    )
    assert (
        "needs --entity-name"
        in cli(
            capsys,
            "configs",
            "--redis",
            redis_server,
            "--alter",
            "--add-config",
            "producer_ids_rate=1",
            "--entity-type",
            "users",
        )[2]
    )
    monkeypatch.delenv("PIDQUOTA_REDIS_URL", raising=False)
    assert "no Redis given" in cli(capsys, "configs", "--describe", "--entity-type", "users")[2]
    monkeypatch.setenv("PIDQUOTA_REDIS_URL", redis_server)  # the environment works too
    assert cli(capsys, "configs", "--describe", "--entity-type", "users")[0] == 0
    code, _, err = cli(
        capsys, "configs", "--redis", "redis://u:pw@127.0.0.1:1/0", "--describe", "--entity-type", "users"
    )
    assert code == 2 and "cannot reach Redis at redis://***@127.0.0.1:1/0" in err and "pw" not in err


def test_status_command_answers_in_event_time(redis_client, redis_server, capsys):
    from pidquota.quota.user_state import UserState
    from pidquota.store.decisions import DecisionStore

    store = DecisionStore(redis_client, clock=lambda: 1_700_000_000.0)  # 2023-11-14T22:13:20Z
    t = 1_600_000_000_000
    states = [
        UserState("User:t", t, 3, 3_600_000, 100.0, 0.0, 1.23456, 36000.4, 100, 1),
        UserState("User:u", t, 3, 1),
    ]
    store.write("q", store.begin("q"), 3, states)
    code, out, _ = cli(capsys, "status", "--redis", redis_server)
    assert code == 0 and [line.split(" (")[0] for line in out.splitlines()] == [
        "User:t: THROTTLED for 36000 ms of event time",
        "  published 2023-11-14T22:13:20.000Z",
        "  admitted_total=100, batch_id=3, quota=100, rate=1.235, throttle_time_ms=36000, "
        "throttled_total=1, tokens=0",
        "User:u: not throttled",
        "  published 2023-11-14T22:13:20.000Z",
        "  batch_id=3",
    ]
    assert out.splitlines()[0] == (
        "User:t: THROTTLED for 36000 ms of event time (until 2020-09-13T12:27:16.000Z; "
        "its latest event 2020-09-13T12:26:40.000Z)"
    )
    assert cli(capsys, "status", "--redis", redis_server, "User:v")[1].splitlines() == [
        "User:v: no state published",
        "  no metrics published for this user",
    ]
    assert cli(capsys, "status", "--redis", redis_server, "t")[1] == out.split("\nUser:u")[0]  # a bare name
    code, _, err = cli(capsys, "status", "--redis", redis_server, "<default>")
    assert code == 2 and "not a user" in err


def test_live_quota_change_applies_within_a_trigger_and_status_answers(
    spark, tmp_path, redis_server, redis_client
):
    from pidquota.conf.loader import load
    from pidquota.quota import QuotaSettings
    from pidquota.store.decisions import DecisionStore, StatusClient
    from pidquota.store.quotas import RedisQuotas, RedisQuotaStore
    from pidquota.store.sink import RedisPublisher
    from pidquota.streaming import query as q
    from pidquota.streaming.outputs.reader import read_output
    from pidquota.streaming.outputs.sink import JsonlSink

    store = RedisQuotaStore(redis_client)
    store.alter("User:live", {"producer_ids_rate": 2})
    quotas = RedisQuotas.load(store, redis_server, {}, refresh_ms=50)
    config = load(environ={}, overrides={"pidquota.spark.shuffle.partitions": "2"})
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    publisher = RedisPublisher(
        DecisionStore(redis_client), quotas, QuotaSettings.from_config(config).window_ms
    )
    sink = JsonlSink(out, publish=publisher)
    query = q.start(
        q.enforcer(q.file_source(spark, str(inp), 0, str(out / "_ck")), config, quotas),
        sink,
        str(out / "_ck"),
        False,
        200,
    )
    try:
        import time

        now = int(time.time() * 1000)

        def feed(name, pids):
            write_events(
                inp / name, [{"timestamp": now, "principal": "User:live", "producer_id": p} for p in pids]
            )
            query.processAllAvailable()

        feed("a.jsonl", range(5))  # quota 2: 2 admitted, 3 throttled
        assert StatusClient(redis_client).status("User:live").throttled
        store.alter("User:live", {"producer_ids_rate": 1000})  # raised while the query runs
        time.sleep(0.2)
        feed("b.jsonl", range(100, 110))
        d = read_output(out, "decisions")
        second = d[d.producer_id >= 100]
        assert set(second.verdict) == {"ADMIT"} and set(second.quota) == {1000.0}
        m = read_output(out, "metrics")
        assert not m.quota_stale.any()
        s = StatusClient(redis_client).status("User:live")
        assert s.metrics["quota"] == 1000 and s.metrics["admitted_total"] == 12
        # fenced under Spark's query id, bound from the first batch (no checkpoint file read)
        assert DecisionStore(redis_client).fence_state(str(query.id))[0] == 1
    finally:
        query.stop()


def configs(capsys, redis_server, *args):
    return cli(capsys, "configs", "--redis", redis_server, *args, "--entity-type", "users")


def test_a_bare_user_name_is_the_same_user_as_its_principal(redis_server, redis_client, capsys):
    """kafka-configs.sh --entity-name alice is the quota of principal User:alice."""
    assert (
        configs(
            capsys, redis_server, "--alter", "--add-config", "producer_ids_rate=7", "--entity-name", "alice"
        )[0]
        == 0
    )
    shown = configs(capsys, redis_server, "--describe", "--entity-name", "User:alice")[1]
    assert shown == "Quota configs for user-principal 'User:alice' are producer_ids_rate=7.0"
    assert configs(capsys, redis_server, "--describe", "--entity-name", "alice")[1] == shown
    from pidquota.store.quotas import RedisQuotaStore

    assert RedisQuotaStore(redis_client).snapshot() == {"User:alice": 7.0}


@pytest.mark.parametrize(
    "name, message",
    [
        (
            "Group:ops",
            "names a 'Group' principal, and quotas are per user; if 'Group:ops' is the user's name, write User:Group:ops",
        ),
        ("User:", "has no user after 'User:'"),
        (" ", "is empty"),
    ],
)
def test_a_name_that_can_match_no_user_is_refused(redis_server, capsys, name, message):
    code, _, err = configs(
        capsys, redis_server, "--alter", "--add-config", "producer_ids_rate=7", "--entity-name", name
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_deleting_a_quota_that_is_not_set_is_no_error(redis_server, redis_client, capsys):
    """As kafka-configs.sh: an idempotent script may delete twice."""
    args = ("--alter", "--delete-config", "producer_ids_rate", "--entity-name", "nobody")
    code, out, err = configs(capsys, redis_server, *args)
    assert code == 0 and err == ""
    assert out.splitlines() == [
        "(producer_ids_rate was not set for user-principal 'User:nobody'; nothing to delete)",
        "Completed updating config for user-principal 'User:nobody'.",
    ]


def test_status_says_when_state_was_published_and_a_stopped_run_s_state_expires(
    redis_client, redis_server, capsys
):
    import time

    from pidquota.quota.user_state import UserState
    from pidquota.store.decisions import DecisionStore

    store = DecisionStore(redis_client, ttl_ms=600_000)
    t = 1_600_000_000_000
    throttled = UserState("User:t", t, 3, 3_600_000, 100.0, 0.0, 1.2, 36000.0, 100, 1)
    store.write("q", store.begin("q"), 3, [throttled, UserState("User:quiet", t, 3, 1)])
    out = cli(capsys, "status", "--redis", redis_server, "User:t")[1].splitlines()
    assert out[0].startswith("User:t: THROTTLED for 36000 ms of event time")
    assert out[1].startswith("  published ") and " ago, wall clock); gone in " in out[1]
    assert out[1].endswith(" unless the enforcer publishes it again")
    store.write("q", store.begin("q"), 4, [throttled])  # User:quiet is not published again ...
    redis_client.pexpire(store.keys.user_state("User:quiet"), 1)  # ... and its 10 minutes are up
    time.sleep(0.05)
    out = cli(capsys, "status", "--redis", redis_server)[1].splitlines()
    assert out[0] == (
        "(1 user(s) not shown: their state expired, not published within pidquota.redis.state.ttl.ms=600000)"
    )
    assert out[1].startswith("User:t: THROTTLED")
    store.ttl_ms = 50  # the run stops: its last publish expires (in 50 ms, not 10 minutes, here)
    store.write("q", store.begin("q"), 5, [throttled])
    time.sleep(0.2)
    assert cli(capsys, "status", "--redis", redis_server)[1] == (
        "No throttle state published: none yet, or none within pidquota.redis.state.ttl.ms=600000 "
        "(no run publishing)."
    )
