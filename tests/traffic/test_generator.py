"""The generator: same seed, same events; each behaviour does what it claims."""

import json

import pytest

from pidquota.conf.errors import ConfigError
from pidquota.traffic.blocks import FileBlockStore
from pidquota.traffic.generator import TrafficGenerator
from pidquota.traffic.mixes import load_mix, validate_mix

HOUR = 3_600_000


@pytest.fixture(scope="module")
def hour():
    gen = TrafficGenerator(seed=7)
    lines = [line for chunk in gen.chunks(HOUR) for line in chunk]
    return gen, [json.loads(x) for x in lines]


def test_same_seed_same_events_however_time_is_sliced():
    a = TrafficGenerator(seed=3)
    b = TrafficGenerator(seed=3)
    whole = a.events(a.start_ms + 10 * 60_000)[1]
    pieces = []
    for cut in (1234, 61_000, 300_001, 600_000):
        pieces += b.events(b.start_ms + cut)[1]
    assert pieces == whole
    assert TrafficGenerator(seed=4).events(a.start_ms + 10 * 60_000)[1] != whole


def test_events_are_in_time_order_and_valid(hour):
    _, events = hour
    ts = [e["timestamp"] for e in events]
    assert ts == sorted(ts)
    assert {"timestamp", "principal", "producer_id", "producer_epoch", "client_id", "broker_id"} <= set(
        events[0]
    )


def pids_of(events, principal):
    return {e["producer_id"] for e in events if e["principal"] == principal}


def test_crash_loop_makes_about_720_pids_an_hour(hour):
    gen, events = hour
    n = len(pids_of(events, "User:crash-loop"))
    assert 680 <= n <= 760, n
    assert gen.summary()["principals"]["User:crash-loop"]["distinct_pids"] == n


def test_per_batch_and_per_error_make_new_pids(hour):
    _, events = hour
    assert len(pids_of(events, "User:per-batch")) == HOUR // 2000  # one per 2 s batch
    per_error = [e for e in events if e["principal"] == "User:per-error"]
    assert 450 <= len({e["producer_id"] for e in per_error}) <= 800  # errors every ~6 s


def test_steady_and_legacy_producers(hour):
    _, events = hour
    assert len(pids_of(events, "User:steady-orders")) == 40
    assert pids_of(events, "User:legacy") == {-1}
    assert {e["producer_epoch"] for e in events if e["principal"] == "User:legacy"} == {-1}


def test_transactional_producers_keep_their_pid_and_bump_epochs(hour):
    gen, events = hour
    by_txn = {}
    for e in events:
        if e["principal"] == "User:txn-ledger":
            by_txn.setdefault(e["transactional_id"], []).append(
                (e["timestamp"], e["producer_id"], e["producer_epoch"])
            )
    assert len(by_txn) == 10
    for seq in by_txn.values():
        assert len({pid for _, pid, _ in seq}) == 1  # one PID for ever
        epochs = [ep for _, _, ep in seq]
        assert epochs == sorted(epochs)  # epochs never go back: fenced zombies send nothing
    s = gen.summary()["principals"]["User:txn-ledger"]
    assert s["epoch_bumps"] > 10 and s["fenced"] >= 1 and s["init_retries"] >= 1


def test_returning_producers_go_idle_past_the_window_and_come_back():
    gen = TrafficGenerator(
        seed=7,
        mix={
            "User:returning": validate_mix({"User:returning": {"behaviour": "returning"}}, "t")[
                "User:returning"
            ]
        },
    )
    events = [json.loads(x) for chunk in gen.chunks(3 * HOUR) for x in chunk]
    ts = sorted({e["timestamp"] for e in events})
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    assert max(gaps) > HOUR  # idle for longer than the quota window
    assert len({e["producer_id"] for e in events}) == 5  # and back with the same PIDs


def test_pids_come_from_kip_730_blocks_and_the_audit_is_complete(tmp_path, hour):
    _, events = hour
    store = FileBlockStore(tmp_path / "b.json")
    gen = TrafficGenerator(seed=7, store=store)
    used = {json.loads(x)["producer_id"] for chunk in gen.chunks(HOUR) for x in chunk} - {-1}
    history = store.history()
    assert all(any(b.start <= pid <= b.block_end for b in history) for pid in used)
    assert len(history) == gen.summary()["cluster"]["blocks_allocated"]
    # a second run continues the numbering: no block is handed out twice
    gen2 = TrafficGenerator(seed=7, store=store)
    gen2.events(gen2.start_ms + 60_000)
    starts = [b.start for b in store.history()]
    assert len(starts) == len(set(starts)) > len(history)


def test_cluster_churn_is_recorded(hour):
    gen, events = hour
    c = gen.summary()["cluster"]
    assert c["leadership_moves"] >= 10 and c["broker_failures"] >= 1
    assert len({e["broker_id"] for e in events}) == 6


@pytest.mark.parametrize(
    "mix, message",
    [
        ({"alice": {"behaviour": "steady"}}, "must look like 'User:name'"),
        ({"User:a": {"behaviour": "weird"}}, "needs a 'behaviour'"),
        ({"User:a": {"behaviour": "steady", "speed": 3}}, "unknown parameter 'speed'"),
        ({"User:a": {"behaviour": "steady", "producers": -1}}, "must be a number >= 0"),
        ({"User:a": {"behaviour": "transactional", "retry_p": 2}}, "is a probability"),
        ({"User:a": {"behaviour": "crash-loop", "every_ms": 0.5}}, "whole number >= 1"),
    ],
)
def test_bad_mixes_are_refused_by_name(mix, message):
    with pytest.raises(ConfigError, match=message):
        validate_mix(mix, "mix")


def test_named_mixes_load():
    assert set(load_mix("default")) >= {"User:crash-loop", "User:txn-ledger"}
    with pytest.raises(Exception, match="neither a named mix"):
        load_mix("no-such-mix")


def lives(events) -> dict[int, tuple[int, int]]:
    """PID -> (first, last) sighting."""
    out: dict[int, tuple[int, int]] = {}
    for e in events:
        first, last = out.get(e["producer_id"], (e["timestamp"], e["timestamp"]))
        out[e["producer_id"]] = (min(first, e["timestamp"]), max(last, e["timestamp"]))
    return out


def run_one(spec: dict, hours: float, rate: float = 20) -> tuple[TrafficGenerator, list[dict]]:
    mix = validate_mix({"User:x": spec}, "t")
    gen = TrafficGenerator(seed=11, mix=mix, rate=rate)
    return gen, [json.loads(x) for chunk in gen.chunks(int(hours * HOUR)) for x in chunk]


def test_rolling_deploys_replace_every_producer_with_a_new_pid_every_deploy():
    # 4 producers, a deploy every hour (the first within the first hour), 30 s apart: in 3 h,
    # 3 deploys, so 4 x 4 PIDs; every instance but the first ones lives an hour, give or take
    # the stagger, and 4 run at any time.
    spec = {"behaviour": "rolling-deploy", "producers": 4, "deploy_ms": HOUR, "stagger_ms": 30_000}
    gen, events = run_one(spec, 3)
    life = lives(events)
    assert len(life) == 16 and gen.summary()["principals"]["User:x"]["distinct_pids"] == 16
    whole = sorted(last - first for first, last in life.values())
    assert all(x >= HOUR - 60_000 for x in whole[8:12])  # the middle generations live an hour
    at = events[len(events) // 2]["timestamp"]
    alive = [p for p, (first, last) in life.items() if first <= at <= last + 10_000]
    assert len(alive) == 4


def test_autoscaled_instances_come_and_go_living_minutes_to_hours():
    spec = {"behaviour": "autoscale", "producers": 8, "min_life_ms": 600_000, "max_life_ms": 3 * HOUR}
    gen, events = run_one(spec, 6)
    life = lives(events)
    end = gen.start_ms + 6 * HOUR - 60_000
    started_late = [first for first, _ in life.values() if first > gen.start_ms + 60_000]
    whole = [last - first for first, last in life.values() if gen.start_ms + 60_000 < first and last < end]
    # about 8 / 63 min a start: some 45 in 6 h, each living 10 min to 3 h (up to one period less)
    assert 30 <= len(started_late) <= 70, len(started_late)
    assert len(whole) >= 20
    assert all(600_000 - 120_000 <= x <= 3 * HOUR for x in whole), sorted(whole)[:3]


def test_the_fleet_mix_has_30_well_behaved_users_of_six_kinds_and_four_floods():
    from pidquota.traffic.behaviours import WELL_BEHAVED

    fleet = load_mix("fleet")
    kinds = [spec["behaviour"] for spec in fleet.values()]
    calm = [k for k in kinds if k in WELL_BEHAVED]
    assert len(calm) >= 30 and len(set(calm)) == 6
    assert sorted(k for k in kinds if k not in WELL_BEHAVED) == [
        "crash-loop",
        "crash-loop",
        "per-batch",
        "per-error",
    ]
