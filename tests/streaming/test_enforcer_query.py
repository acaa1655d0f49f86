"""End-to-end: the real query through a local SparkSession on event files."""

import math

import numpy as np

from pidquota.quota import PrincipalQuota, QuotaSettings

MIN = 60_000


def ev(t, principal, pid, epoch=None, **extra):
    e = {"timestamp": t, "principal": principal, "producer_id": pid, **extra}
    if epoch is not None:
        e["producer_epoch"] = epoch
    return e


def test_crash_loop_verdicts_follow_the_bucket_math(make_enforcer, tmp_path):
    # R = 60 per hour: Q = 1/60 per s. A new PID every 5 s for 20 minutes.
    events = [ev(t, "User:crash", 100 + i) for i, t in enumerate(range(0, 20 * MIN, 5000))]
    out = make_enforcer(tmp_path, {"User:crash": 60}).run(events)
    d = out["decisions"].sort_values(["timestamp", "producer_id"])
    admits = d[d.verdict == "ADMIT"]
    assert len(admits) == 60 + math.floor((20 * MIN - 5000) / 1000 / 60)  # R + Q * t, t = 1195 s
    # every throttle time is the contract's formula, from the tokens at decision time
    thr = d[d.verdict == "THROTTLE"]
    assert len(thr) > 100
    expected = np.ceil((1 - thr.tokens) * 60_000 / 1)  # (1 - tokens) / Q * 1000 with Q = 1/60
    assert (thr.throttle_time_ms - expected).abs().max() <= 1
    # and exactly what the core decides on the same events
    core = PrincipalQuota(60, QuotaSettings.from_config(make_enforcer(tmp_path / "x", {}).config))
    want = [
        (x.producer_id, x.verdict, x.throttle_time_ms)
        for x in (core.observe(e["timestamp"], e["producer_id"]) for e in events)
        if x is not None
    ]
    assert list(zip(d.producer_id, d.verdict, d.throttle_time_ms, strict=True)) == want


def test_steady_producers_never_throttled_across_windows_and_epoch_bumps_not_counted(make_enforcer, tmp_path):
    # W = 60 s, quota 5: five long-lived producers over ten windows, two bumping epochs.
    events = []
    for t in range(0, 10 * MIN, 7000):
        for pid in range(5):
            epoch = (t // 20_000) if pid < 2 else 0
            events.append(ev(t + pid, "User:steady", 9000 + pid, epoch))
    runner = make_enforcer(tmp_path, {"User:steady": 5}, **{"producer.id.quota.window.size.seconds": "60"})
    out = runner.run(events)
    d = out["decisions"]
    assert sorted(d.producer_id) == [9000, 9001, 9002, 9003, 9004]
    assert set(d.verdict) == {"ADMIT"}
    assert out["metrics"].throttled.sum() == 0


def test_non_idempotent_producers_are_ignored(make_enforcer, tmp_path):
    events = [ev(t, "User:legacy", -1) for t in range(0, 10_000, 100)]
    out = make_enforcer(tmp_path, {"User:legacy": 1}).run(events)
    assert out["decisions"].empty
    m = out["metrics"].iloc[0]
    assert (m.events, m.ignored, m.admitted, m.throttled) == (100, 100, 0, 0)


def test_default_override_and_unlimited_quotas(make_enforcer, tmp_path):
    events = [ev(0, p, pid) for p in ("User:vip", "User:anyone") for pid in range(1, 6)]
    out = make_enforcer(tmp_path, {"User:vip": 5, "<default>": 2}).run(events)
    d = out["decisions"]
    counts = d.groupby(["principal", "verdict"]).size().to_dict()
    assert counts == {("User:vip", "ADMIT"): 5, ("User:anyone", "ADMIT"): 2, ("User:anyone", "THROTTLE"): 3}
    assert set(d[d.principal == "User:anyone"].quota) == {2.0}
    # without a <default>, anyone else is unlimited: no state, no decisions
    out = make_enforcer(tmp_path / "u", {"User:vip": 5}).run(events)
    assert set(out["decisions"].principal) == {"User:vip"}
    m = out["metrics"].set_index("principal")
    assert m.loc["User:anyone", "passed"] == 5 and np.isnan(m.loc["User:anyone", "quota"])


BAD = {
    "not json": "not valid JSON",
    "": "empty record",
    "[1, 2]": "not a JSON object",
    '{"timestamp": 5, "principal": "User:a", "producer_id": 1} extra': "text after the object",
    '{"principal": "User:a", "producer_id": 1}': "missing required field 'timestamp'",
    '{"timestamp": 5, "producer_id": 1}': "missing required field 'principal'",
    '{"timestamp": 5, "principal": "User:a"}': "missing required field 'producer_id'",
    '{"timestamp": "5", "principal": "User:a", "producer_id": 1}': "field 'timestamp' must be an integer",
    '{"timestamp": 5.5, "principal": "User:a", "producer_id": 1}': "field 'timestamp' must be an integer",
    '{"timestamp": 5, "principal": 7, "producer_id": 1}': "field 'principal' must be a string",
    '{"timestamp": 5, "principal": "User:a", "producer_id": true}': "field 'producer_id' must be an integer",
    '{"timestamp": -1, "principal": "User:a", "producer_id": 1}': "field 'timestamp' is out of range",
    '{"timestamp": 5, "principal": "User:a", "producer_id": 99999999999999999999}': "'producer_id' is out",
    '{"timestamp": 5, "principal": "User:a", "producer_id": 1, "producer_epoch": 70000}': "'producer_epoch'",
    '{"timestamp": 5, "principal": " ", "producer_id": 1}': "principal is empty",
    '{"timestamp": 5, "principal": "' + "x" * 300 + '", "producer_id": 1}': "longer than 256 characters",
}


def test_every_kind_of_bad_record_is_dead_lettered_and_nothing_is_lost(make_enforcer, tmp_path):
    good = [ev(t, "User:a", t % 7) for t in range(0, 5000, 50)] + [ev(1, "User:b", -1)]
    good.append(
        ev(2, "User:a", 3, 1, client_id="c", broker_id=2, topic="t", partition=4, transactional_id="x")
    )
    out = make_enforcer(tmp_path, {"<default>": 3}).run(good + list(BAD))
    dead = out["dead-letters"]
    assert len(dead) == len(BAD)
    for raw, reason in zip(dead.raw, dead.reason, strict=True):
        assert BAD[raw] in reason, (raw, reason)
    m = out["metrics"]
    assert m.events.sum() + len(dead) == len(good) + len(BAD)  # every input row is accounted for
    assert (m.admitted + m.throttled + m.passed + m.ignored == m.events).all()
    assert m.admitted.sum() + m.throttled.sum() == len(out["decisions"])


def test_resume_from_checkpoint_decides_only_new_events_and_keeps_state(make_enforcer, tmp_path):
    runner = make_enforcer(tmp_path, {"User:c": 10})
    first = runner.run([ev(t * 1000, "User:c", t) for t in range(15)], "a")
    assert (first["decisions"].verdict == "ADMIT").sum() == 10
    second = runner.run(
        [ev(15_000 + t * 1000, "User:c", 100 + t) for t in range(5)] + [ev(20_000, "User:c", 3)], "b"
    )
    d = second["decisions"]
    assert len(d) == 15 + 5  # the first batch's decisions are not repeated
    assert not d.duplicated(["producer_id", "timestamp"]).any()
    assert set(d[d.batch_id == 1].producer_id) == set(range(100, 105))  # PID 3 is still known
    assert second["metrics"].iloc[-1].admitted_total == 10


def test_late_events_are_judged_not_dropped_by_the_watermark(make_enforcer, tmp_path):
    # Pins the never-late guard in streaming/query.py: Spark would drop these.
    runner = make_enforcer(tmp_path, {"User:l": 100}, **{"pidquota.watermark.delay.ms": "1000"})
    runner.run([ev(10 * MIN, "User:l", 1)], "a")
    late = runner.run([ev(0, "User:l", 2), ev(10 * MIN + 5, "User:l", 3)], "b")
    d = late["decisions"]
    assert set(d[d.batch_id >= 1].producer_id) == {2, 3}
    assert d[d.producer_id == 2].timestamp.iloc[0] == 0


def test_idle_principals_are_evicted_by_event_time(make_enforcer, tmp_path):
    runner = make_enforcer(
        tmp_path,
        {"<default>": 100},
        **{"producer.id.quota.window.size.seconds": "60", "pidquota.watermark.delay.ms": "0"},
    )
    runner.run([ev(0, "User:idle", 1), ev(0, "User:busy", 2)], "a")
    runner.run([ev(10 * MIN + t, "User:busy", 2) for t in range(3)], "b")
    rows = [p["stateOperators"][0]["numRowsTotal"] for p in runner.last_progress if p["stateOperators"]]
    assert rows[-1] == 1, rows  # only User:busy is left
    out = runner.run([ev(11 * MIN, "User:idle", 1)], "c")
    assert out["decisions"].iloc[-1].verdict == "ADMIT"  # a fresh start: PID 1 judged again


EDGES = {
    # trailing white space of any kind is white space; a leading BOM is tolerated
    '{"timestamp": 5, "principal": "User:e", "producer_id": 1}\t': None,
    '{"timestamp": 5, "principal": "User:e", "producer_id": 2} \t ': None,
    '\ufeff{"timestamp": 5, "principal": "User:e", "producer_id": 3}': None,
    # an integer is written as one: 5.0 is refused like "5"
    '{"timestamp": 5, "principal": "User:e", "producer_id": 5.0}': "field 'producer_id' must be an integer, got 5.0",
    '{"timestamp": 5, "principal": "User:e", "producer_id": 1e2}': "field 'producer_id' must be an integer, got 1e2",
    '{"timestamp": 5.0, "principal": "User:e", "producer_id": 1}': "field 'timestamp' must be an integer, got 5.0",
    '{"timestamp": 5, "principal": "User:e", "producer_id": ' + "9" * 400 + "}": "the number is too large",
    '{"timestamp": 5, "principal": "User:e", "producer_id": ' + "9" * 2000 + "}": "more than 1000 digits",
    '{"timestamp": 5, "principal": "\\t\\n", "producer_id": 1}': "principal is empty",
    '{"timestamp": 5, "principal": "User:e", "producer_id": 1}}': "text after the object",
    '{"timestamp": 5, "principal": "User:e", "producer_id": 1} {}': "text after the object",
    '{"timestamp": 5, "principal": "a}", "producer_id": 1, "client_id": "{x}"}': None,
    '{"a":' * 3000 + "1" + "}" * 3000: "too many '{' or '['",
}


def test_parser_edges(make_enforcer, tmp_path):
    out = make_enforcer(tmp_path, {"<default>": 10}).run(list(EDGES))
    dead = dict(zip(out["dead-letters"].raw, out["dead-letters"].reason, strict=True))
    for raw, reason in EDGES.items():
        if reason is None:
            assert raw not in dead, (raw, dead.get(raw))
        else:
            assert reason in dead[raw], (raw[:80], dead.get(raw))
    assert out["metrics"].events.sum() == sum(r is None for r in EDGES.values())


class _AddressBookOnly:
    """The sink's actuator interface (``actuate/runner.BatchActuator``), acting on nothing:
    it keeps the address book a connection-rate actuator keeps."""

    by_address, acted = True, {}

    def __init__(self):
        from pidquota.actuate.addresses import AddressBook

        self.book = AddressBook()

    def batch_begins(self):
        pass

    def batch_ends(self):
        pass

    def __call__(self, rows, addresses, clients):
        self.book.add(addresses)
        return []


def test_the_address_book_sees_an_unlimited_users_address_through_the_query(make_enforcer, tmp_path):
    """Issue 54: only the decisions (the limited principals') fed the address book, so a
    connection rate could land on an address an unlimited user shares. Through the real query
    on the plug-in's records: User:crash floods from 10.0.0.5 and 10.0.0.6, User:free (no
    quota) uses 10.0.0.5; the book keeps 10.0.0.6 alone as User:crash's own."""
    import json

    def init(seq, principal, address):
        return json.dumps(
            {
                "v": 1, "at_ms": 1_764_000_000_000 + seq * 100, "broker": 1, "run": "c3a9", "seq": seq,
                "principal": principal, "client_id": "app", "client_address": address,
                "listener": "PLAINTEXT", "transactional_id": None, "outcome": "granted", "software": None,
            },
            separators=(",", ":"),  # as the plug-in writes it
        )  # fmt: skip

    lines = [init(i, "User:crash", f"10.0.0.{5 + i % 2}") for i in range(8)]
    lines += [init(100 + i, "User:free", "10.0.0.5") for i in range(3)]
    runner = make_enforcer(
        tmp_path,
        {"User:crash": 1},
        **{"pidquota.input.format": "plugin-inits", "pidquota.actuator": "on"},
    )
    runner.act = _AddressBookOnly()
    out = runner.run_lines(lines)
    assert (out["decisions"].verdict == "THROTTLE").sum() > 0
    assert runner.act.book.shared("10.0.0.5") and runner.act.book.exclusive("User:crash") == ("10.0.0.6",)
