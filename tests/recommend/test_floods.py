"""``pidquota recommend`` tells floods from growth: the PID lives, the classification and the
quotas it emits, which, applied through the enforcer's contract, throttle every flood and no
well-behaved user: on the generator's default mix, on a fleet of 34 well-behaved users and
four floods, on five users of which three are floods, and on 10,000 synthetic users."""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest

from pidquota.quota import THROTTLE, PrincipalQuota, QuotaSettings
from pidquota.quota.resolver import DEFAULT_ENTITY, resolve
from pidquota.recommend import floods, output
from pidquota.recommend import stats as rec
from pidquota.recommend.rules import flood_quota, growth_quota
from pidquota.traffic.generator import TrafficGenerator
from pidquota.traffic.mixes import load_mix, validate_mix

W = 3_600_000
L = rec.DEFAULT_SHORT_LIFE_MS
FLOOD_KINDS = ("crash-loop", "per-batch", "per-error")


def events(*rows) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=["principal", "producer_id", "timestamp"])


def generate(mix, hours: float, rate: float = 20, seed: int = 7) -> pd.DataFrame:
    gen = TrafficGenerator(seed=seed, mix=mix, rate=rate)
    _, lines = gen.events(gen.start_ms + int(hours * W))
    docs = [json.loads(x) for x in lines]
    return events(*[(d["principal"], d["producer_id"], d["timestamp"]) for d in docs])


def recommend(ev: pd.DataFrame, headroom: float = 2.0, share: float = 0.9) -> floods.Plan:
    """What ``pidquota recommend`` suggests for ``ev``, from the pandas reference."""
    usage = rec.with_suggestions(rec.reference_stats(ev, W, W // 4), headroom)
    return floods.plan(usage, headroom, share, L, 10.0)


def throttled_by(ev: pd.DataFrame, quotas: dict) -> dict[str, int]:
    """THROTTLE decisions per principal, each under the quota it resolves to (the contract)."""
    out = {}
    for principal, own in ev.groupby("principal"):
        rate = resolve(quotas, principal)
        if rate is None or not (own["producer_id"] >= 0).any():
            continue
        own = own.sort_values(["timestamp", "producer_id"], kind="stable")
        state = PrincipalQuota(rate, QuotaSettings(window_ms=W))
        decisions = state.observe_batch(own["timestamp"], own["producer_id"], np.full(len(own), -1))
        out[principal] = sum(d.verdict == THROTTLE for d in decisions)
    return out


def floods_of(mix: dict) -> set[str]:
    return {p for p, spec in mix.items() if spec["behaviour"] in FLOOD_KINDS}


def assert_throttles_every_flood_and_no_one_else(ev: pd.DataFrame, plan: floods.Plan, rogues: set[str]):
    script = output.plan_script(plan)
    for rogue in rogues:
        assert f"# {rogue}: suspected flood" in script
    throttled = throttled_by(ev, plan.quotas())
    hit = {p for p, n in throttled.items() if n}
    assert hit == rogues, (sorted(hit), plan.quotas())


# -- the evidence ------------------------------------------------------------------------


def test_pid_lives_worked_example():
    # L = 10 s, input from 0 s to 100 s (User:w's PID -1 counts for the span)
    ev = events(
        ("User:u", 1, 20_000),
        ("User:u", 1, 25_000),  # judged, lived 5 s: short
        ("User:u", 2, 20_000),  # judged, one request: short
        ("User:u", 3, 95_000),  # first seen 5 s before the end: not judged
        ("User:u", 4, 3_000),  # last seen 3 s after the start: not judged
        ("User:v", 9, 0),
        ("User:v", 9, 100_000),  # judged, lived 100 s
        ("User:v", 8, 50_000),
        ("User:v", 8, 60_000),  # lived exactly L: not short
        ("User:w", -1, 100_000),
    )
    lives = rec.pid_lives(ev, 10_000)
    assert lives.to_dict("records") == [
        {"principal": "User:u", "judged_pids": 2, "short_lived_pids": 2, "one_request_pids": 1},
        {"principal": "User:v", "judged_pids": 2, "short_lived_pids": 0, "one_request_pids": 0},
    ]


def test_an_input_shorter_than_twice_the_short_life_judges_no_pid():
    ev = events(*[("User:u", p, p * 1000) for p in range(599)])  # 598 s < 2 x 300 s
    assert rec.pid_lives(ev, L)["judged_pids"].tolist() == [0]
    ev = events(*[("User:u", p, p * 1000) for p in range(601)])  # 600 s: the PID at 300 s is judged
    assert rec.pid_lives(ev, L).loc[0, ["judged_pids", "short_lived_pids"]].tolist() == [1, 1]


def test_a_deploy_just_after_the_input_starts_is_not_taken_for_short_lives():
    # 10 producers redeployed 2 minutes into the input: the old PIDs' 2 minutes are censored
    ev = events(
        *[("User:d", p, t) for p in range(10) for t in range(0, 120_000, 10_000)],
        *[("User:d", 100 + p, t) for p in range(10) for t in range(120_000, 3 * W, 60_000)],
    )
    lives = rec.pid_lives(ev, L).iloc[0]
    assert lives["judged_pids"] == 10 and lives["short_lived_pids"] == 0


# -- the classification and its quotas ---------------------------------------------------


def usage_of(rows) -> pd.DataFrame:
    """Usage from (principal, peak, judged, short-lived) rows; p99 = peak, no one-request PIDs."""
    stats = pd.DataFrame(
        [(p, float(m), float(m), m, max(m, j), j, s, 0) for p, m, j, s in rows],
        columns=list(rec.STATS_COLUMNS),
    )
    return rec.with_suggestions(stats, 2.0)


def test_floods_module_worked_example():
    usage = usage_of(
        [
            ("orders", 40, 40, 0),
            ("payments", 20, 20, 0),
            ("ledger", 10, 10, 0),
            ("nightly", 3, 6, 6),
            ("crash", 718, 700, 700),
        ]
    )
    plan = floods.plan(usage, 2.0, 0.9, L, 10.0)
    assert plan.fleet.median_peak == 20
    assert plan.usage.set_index("principal")["flood"].to_dict() == {
        "orders": False,
        "payments": False,
        "ledger": False,
        "nightly": False,  # short-lived, but 3 <= 10 x 20
        "crash": True,
    }
    assert plan.default.rate == 80 and plan.default.users == 4
    assert plan.quotas() == {DEFAULT_ENTITY: 80, "crash": 80}


def test_rules_worked_examples():
    assert growth_quota(15, 22) == 22 and growth_quota(15, 9) == 15
    assert flood_quota(718, 80) == 80 and flood_quota(718, 500) == 359
    assert flood_quota(2, 80) == 1


def test_a_short_lived_user_near_the_fleet_is_not_a_flood_and_a_big_long_lived_one_is_not_either():
    usage = usage_of([("a", 5, 5, 0), ("b", 6, 6, 0), ("cron", 12, 12, 12), ("big", 900, 900, 0)])
    plan = floods.plan(usage, 2.0, 0.5, L, 10.0)
    assert not plan.usage["flood"].any()
    # the default from all four: 10, 12, 24, 1800, k = 2 -> 12; big's own quota max(1800, 900)
    assert plan.quotas() == {DEFAULT_ENTITY: 12, "cron": 24, "big": 1800}


def test_when_every_user_is_short_lived_the_median_is_the_whole_fleets():
    usage = usage_of([("a", 5, 5, 5), ("b", 6, 6, 6), ("c", 7, 7, 7), ("d", 800, 800, 800)])
    plan = floods.plan(usage, 2.0, 0.9, L, 10.0)
    assert plan.fleet.median_peak == 6.5
    assert plan.usage.set_index("principal")["flood"].to_dict() == {
        "a": False,
        "b": False,
        "c": False,
        "d": True,
    }


def random_fleet(rng: np.random.Generator, calm: int, rogues: int) -> pd.DataFrame:
    """Synthetic usage: ``calm`` users with peaks spread over two orders of magnitude and a
    minority of short-lived PIDs (some none judged), and ``rogues`` with short lives and peaks
    over ten times the calm median."""
    peaks = np.maximum(1, np.exp(rng.normal(2.3, 1.0, calm))).astype(int)
    judged = rng.integers(0, 50, calm)
    short = (judged * rng.uniform(0, 0.5, calm)).astype(int)
    median = np.median(peaks)
    rows = list(zip([f"User:calm-{i}" for i in range(calm)], peaks, judged, short, strict=True))
    for i in range(rogues):
        peak = int(median * rng.uniform(10.5, 200))
        j = int(rng.integers(5, 5000))
        rows.append((f"User:flood-{i}", peak, j, int(j * rng.uniform(0.6, 1.0))))
    return usage_of(rows)


@pytest.mark.parametrize("calm, rogues", [(2, 3), (4, 1), (30, 3), (1_000, 20), (9_900, 100)])
def test_any_fleet_size_the_quotas_hold_every_flood_and_never_throttle_the_rest(calm, rogues):
    """For 5 to 10,000 users: exactly the floods are suspected; every other user's quota (its
    own or the default) is at least its peak (never throttled, rules.py's theorem); every
    flood's is at most the default and half its peak (throttled, rules.flood_quota)."""
    rng = np.random.default_rng(calm)
    usage = random_fleet(rng, calm, rogues)
    began = time.perf_counter()
    plan = floods.plan(usage, 2.0, 0.9, L, 10.0)
    quotas = plan.quotas()
    elapsed = time.perf_counter() - began
    rows = plan.usage.to_dict("records")
    assert {r["principal"] for r in rows if r["flood"]} == {f"User:flood-{i}" for i in range(rogues)}
    for r in rows:
        rate = resolve(quotas, r["principal"])
        if r["flood"]:
            assert rate <= quotas[DEFAULT_ENTITY] and 2 * rate <= r["max"], r
        else:
            assert rate >= r["max"], r
    assert plan.default.users == calm and plan.default.floods == rogues
    assert elapsed < 5, elapsed


# -- generated traffic: applied as emitted ------------------------------------------------


def test_the_default_mix_every_flood_throttled_no_one_else():
    """The generator's default mix (two hours, at 20 requests a second from the well-behaved
    producers): the old rule gave <default> = the worst flood's peak x 2."""
    ev = generate("default", 2)
    plan = recommend(ev)
    rogues = floods_of(load_mix("default"))
    assert set(plan.floods()["principal"]) == rogues
    assert plan.default.rate == 80 and plan.default.users == 4  # 40 steady-orders x 2
    assert_throttles_every_flood_and_no_one_else(ev, plan, rogues)


@pytest.fixture(scope="module")
def fleet():
    """Four hours of the "fleet" mix: 34 well-behaved users of six kinds, four floods."""
    return generate("fleet", 4)


def test_the_fleet_every_flood_throttled_no_one_else(fleet):
    mix = load_mix("fleet")
    rogues = floods_of(mix)
    assert len(rogues) == 4 and len(mix) - len(rogues) >= 30
    plan = recommend(fleet)
    assert set(plan.floods()["principal"]) == rogues
    own = set(plan.quotas()) - rogues - {DEFAULT_ENTITY}
    assert own and all(plan.quotas()[u] > plan.default.rate for u in own)  # growth gets its room
    assert_throttles_every_flood_and_no_one_else(fleet, plan, rogues)


def test_the_fleet_under_the_old_rule_throttles_no_flood(fleet):
    """Why: each user sized to its own history (ceil(p99 x 2) where above the <default> of all
    users) gives each flood twice its peak, and none of them is throttled."""
    usage = rec.with_suggestions(rec.reference_stats(fleet, W, W // 4), 2.0)
    default = rec.default_suggestion(usage, 2.0, 0.9).rate
    old = {
        DEFAULT_ENTITY: default,
        **{r.principal: r.suggested for r in usage.itertuples() if r.suggested > default},
    }
    throttled = throttled_by(fleet, old)
    assert not any(throttled[p] for p in floods_of(load_mix("fleet")))


def test_five_users_three_of_them_floods():
    """The smallest fleet: the floods are the majority, so the median of all users' peaks
    would be a flood's; the median of the long-lived users' is not."""
    mix = validate_mix(
        {
            "User:steady": {"behaviour": "steady", "producers": 6},
            "User:deploys": {"behaviour": "rolling-deploy", "producers": 4, "deploy_ms": 3_600_000},
            "User:crash-loop": {"behaviour": "crash-loop", "every_ms": 30_000},
            "User:per-batch": {"behaviour": "per-batch"},
            "User:per-error": {"behaviour": "per-error"},
        },
        "five users",
    )
    ev = generate(mix, 2.5)
    plan = recommend(ev)
    assert plan.fleet.median_peak < 10
    assert set(plan.floods()["principal"]) == floods_of(mix)
    assert_throttles_every_flood_and_no_one_else(ev, plan, floods_of(mix))
