"""``pidquota recommend`` without Spark: the reference numbers, the contract behind the
rules, the output (table, JSON, configs script) and the command line's checks."""

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pidquota.cli.main import main
from pidquota.quota import THROTTLE, PrincipalQuota, QuotaSettings
from pidquota.recommend import floods, output
from pidquota.recommend import stats as rec

W = 60_000  # a minute, so the examples read in seconds
CONF_QUOTAS = Path(__file__).resolve().parents[2] / "conf" / "quotas.json"


def events(*rows) -> pd.DataFrame:
    """(principal, producer_id, timestamp in ms) rows as an events frame."""
    return pd.DataFrame(list(rows), columns=["principal", "producer_id", "timestamp"])


def sightings(new: pd.DataFrame) -> list[tuple]:
    return list(new.itertuples(index=False, name=None))


# -- new sightings ------------------------------------------------------------------------


def test_a_pid_is_new_again_only_after_a_gap_over_w():
    ev = events(
        ("User:a", 1, 0),
        ("User:a", 1, 60_000),  # exactly W later: still known
        ("User:a", 1, 120_001),  # W + 1 ms after the last sighting: new
        ("User:a", 2, 10_000),
        ("User:a", 2, 10_000),  # the same sighting twice
        ("User:a", 2, 69_999),  # under W: known
        ("User:a", -1, 5_000),  # not idempotent
        ("User:a", -7, 6_000),
        ("User:b", 1, 30_000),  # another principal's PID 1 is its own
    )
    new = rec.new_sightings(ev, W)
    assert list(new.columns) == ["principal", "producer_id", "timestamp"]
    assert sightings(new) == [
        ("User:a", 1, 0),
        ("User:a", 2, 10_000),
        ("User:a", 1, 120_001),
        ("User:b", 1, 30_000),
    ]


def test_new_sightings_do_not_depend_on_the_input_order():
    rng = np.random.default_rng(3)
    ev = events(*[("User:a", int(rng.integers(-2, 6)), int(rng.integers(0, 400_000))) for _ in range(300)])
    shuffled = ev.sample(frac=1, random_state=1)
    assert sightings(rec.new_sightings(shuffled, W)) == sightings(rec.new_sightings(ev, W))


def test_a_principal_with_only_non_idempotent_pids_has_no_sightings():
    ev = events(("User:legacy", -1, 0), ("User:legacy", -1, 1))
    assert rec.new_sightings(ev, W).empty
    assert rec.active_pids(ev).empty
    assert rec.reference_stats(ev, W, W // 4).empty


# -- windows and peaks --------------------------------------------------------------------


def test_module_worked_example():
    ev = events(("User:a", 1, 0), ("User:a", 1, 70_000), ("User:a", 2, 10_000), ("User:a", 2, 20_000))
    new = rec.new_sightings(ev, W)
    assert sightings(new) == [("User:a", 1, 0), ("User:a", 2, 10_000), ("User:a", 1, 70_000)]
    counts = rec.window_counts(new, W, 15_000)
    assert counts["window_start"].tolist() == [-45_000, -30_000, -15_000, 0, 15_000, 30_000, 45_000, 60_000]
    assert counts["new_pids"].tolist() == [2, 2, 2, 2, 1, 1, 1, 1]
    stats = rec.reference_stats(ev, W, 15_000)
    assert stats.to_dict("records") == [
        {
            "principal": "User:a",
            "p50": 1.5,
            "p99": 2.0,
            "max": 2,
            "active_pids": 2,
            "judged_pids": 0,  # 70 s of input: no PID could have shown a life of 300 s
            "short_lived_pids": 0,
            "one_request_pids": 0,
        }
    ]
    assert rec.with_suggestions(stats, 2)["suggested"].tolist() == [4]


def test_windows_without_new_pids_in_the_span_count_zero():
    # W = 4 ms, slide 2 ms; new sightings at 0 and 20: windows from -2 to 20
    new = rec.new_sightings(events(("u", 1, 0), ("u", 2, 20)), 4)
    counts = rec.window_counts(new, 4, 2)
    assert counts["window_start"].tolist() == list(range(-2, 21, 2))
    assert counts["new_pids"].tolist() == [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1]
    stats = rec.window_stats(counts, rec.peaks(new, 4), rec.active_pids(new))
    assert stats.loc[0, "p50"] == 0.0  # eight zeros of twelve; without them it would be 1


def test_usage_numbers_by_hand():
    # W = 4 ms, slide 1 ms: 1 new PID at 0, 3 at 3, one PID -1 and a repeat of PID 1 within W.
    ev = events(("u", 1, 0), ("u", 2, 3), ("u", 3, 3), ("u", 4, 3), ("u", -1, 2), ("u", 1, 2))
    new = rec.new_sightings(ev, 4)
    counts = rec.window_counts(new, 4, 1)
    # windows from -3 to 3: [-3,1) 1, [-2,2) 1, [-1,3) 1, [0,4) 4, [1,5) 3, [2,6) 3, [3,7) 3
    assert counts["new_pids"].tolist() == [1, 1, 1, 4, 3, 3, 3]
    usage = rec.with_suggestions(rec.reference_stats(ev, 4, 1), headroom=2)
    row = usage.iloc[0]
    # sorted 1 1 1 3 3 3 4: p50 is the 4th value; p99 sits at rank 0.99 x 6 = 5.94, between 3 and 4
    assert row["p50"] == 3.0
    assert row["p99"] == pytest.approx(3.94)
    assert row["max"] == 4 and row["active_pids"] == 4
    assert row["suggested"] == 8  # ceil(3.94 x 2) = ceil(7.88)
    assert bool(row["fits"]) is True


def test_the_peak_counts_windows_off_the_grid():
    ev = events(*[("u", p, 14_000) for p in range(5)], *[("u", p, 61_000) for p in range(5, 10)])
    new = rec.new_sightings(ev, W)
    assert rec.window_counts(new, W, 15_000)["new_pids"].max() == 5
    assert rec.peaks(new, W).to_dict("records") == [{"principal": "u", "peak": 10}]


def test_peaks_equal_a_brute_force_count_over_every_start():
    rng = np.random.default_rng(5)
    for _ in range(40):
        ts = rng.integers(0, 50, size=int(rng.integers(1, 30)))
        new = events(*[("u", i, int(t)) for i, t in enumerate(ts)])
        w = int(rng.integers(1, 15))
        brute = max(int(((ts >= s) & (ts < s + w)).sum()) for s in range(-w, 51))
        assert rec.peaks(new, w)["peak"].tolist() == [brute]
        grid = rec.window_counts(new, w, 1)["new_pids"].max()  # a 1 ms grid is every start
        assert grid == brute


def test_the_default_slide_is_the_layer_span():
    assert rec.default_slide_ms(3_600_000, 4) == 900_000
    assert rec.default_slide_ms(1_000, 3) == 333
    assert rec.default_slide_ms(2, 4) == 1


# -- the contract behind the rules ---------------------------------------------------------


def throttles(ev: pd.DataFrame, rate: float, window_ms: int, layer_count: int = 4) -> int:
    """THROTTLE decisions of the pure-Python contract on one principal's events, in time order."""
    state = PrincipalQuota(rate, QuotaSettings(window_ms=window_ms, layer_count=layer_count))
    ordered = ev.sort_values(["timestamp", "producer_id"], kind="stable")
    out = 0
    for t, pid in zip(ordered["timestamp"].tolist(), ordered["producer_id"].tolist(), strict=True):
        d = state.observe(t, pid)
        out += d is not None and d.verdict == THROTTLE
    return out


def random_user(rng, window_ms: int) -> pd.DataFrame:
    """Bursts, steady reuse and crash-loop-like runs of new PIDs, some PIDs < 0."""
    n = int(rng.integers(5, 120))
    pool = int(rng.integers(1, 40))
    ts = np.sort(rng.integers(0, window_ms * int(rng.integers(1, 8)), size=n))
    if rng.random() < 0.5:  # a burst
        ts[: n // 3] = ts[0]
    pids = rng.integers(-1, pool, size=n)
    return events(*[("u", int(p), int(t)) for p, t in zip(pids, ts, strict=True)])


def test_a_quota_at_the_peak_never_throttles():
    """The theorem of recommend/rules.py, on random traffic: with R the most new PIDs in any
    window [s, s + W), the enforcer's contract never throttles the user; the <default> rule
    rests on it."""
    rng = np.random.default_rng(2024)
    tight = 0
    for case in range(300):
        window_ms = int(rng.choice([10, 100, 1_000, 60_000]))
        layers = int(rng.choice([1, 2, 4, 7]))
        ev = random_user(rng, window_ms)
        peak = rec.peaks(rec.new_sightings(ev, window_ms), window_ms)["peak"]
        if peak.empty:
            continue
        assert throttles(ev, int(peak[0]), window_ms, layers) == 0, (case, ev.to_dict("list"))
        tight += peak[0] > 1 and throttles(ev, int(peak[0]) - 1, window_ms, layers) > 0
    assert tight > 50  # the peak is often the threshold itself: one less throttles


def test_a_quota_at_the_grid_maximum_can_throttle():
    """Why max/W is over every window: 5 PIDs at 14 s and 5 at 61 s fill no grid window
    beyond 5, but a quota of 5 throttles the second burst (only 5 x 47/60 tokens are back)."""
    ev = events(*[("u", p, 14_000) for p in range(5)], *[("u", p, 61_000) for p in range(5, 10)])
    assert throttles(ev, 5, W) == 2
    assert throttles(ev, 10, W) == 0


# -- generated traffic: the suggested quotas throttle no well-behaved user -------------------


@pytest.fixture(scope="module")
def generated():
    """Two hours of the generator's default mix (Spark-free), as an events frame."""
    from pidquota.traffic.generator import TrafficGenerator

    gen = TrafficGenerator(seed=7)
    _, lines = gen.events(gen.start_ms + 2 * 3_600_000)
    docs = [json.loads(x) for x in lines]
    return events(*[(d["principal"], d["producer_id"], d["timestamp"]) for d in docs])


def test_suggested_quotas_throttle_no_well_behaved_user(generated):
    """The issue's test, through the pure-Python contract: the suggested <default> (at a share
    that the four well-behaved users of seven make up) and their own suggestions throttle none
    of them, and the default does throttle the rogues."""
    window_ms = 3_600_000
    usage = rec.with_suggestions(rec.reference_stats(generated, window_ms, window_ms // 4), 2.0)
    default = rec.default_suggestion(usage, 2.0, 0.5)
    by_user = usage.set_index("principal")
    well_behaved = ["User:steady-orders", "User:steady-payments", "User:txn-ledger", "User:returning"]
    rogues = ["User:crash-loop", "User:per-batch", "User:per-error"]
    assert sorted(by_user.index) == sorted(well_behaved + rogues)  # User:legacy has no PIDs >= 0
    assert default.covered == len(well_behaved)
    for user in well_behaved:
        own = generated[generated["principal"] == user]
        assert by_user.loc[user, "fits"] and by_user.loc[user, "max"] <= default.rate, user
        assert throttles(own, int(by_user.loc[user, "suggested"]), window_ms) == 0, user
        assert throttles(own, default.rate, window_ms) == 0, user
    for user in rogues:
        assert throttles(generated[generated["principal"] == user], default.rate, window_ms) > 0, user


def test_what_if_summary_matches_the_contract_counters(generated):
    """The what-if summary of decisions counts what the enforcer's own counters count."""
    window_ms = 3_600_000
    rows, totals = [], {}
    for principal, ev in generated.groupby("principal"):
        state = PrincipalQuota(60, QuotaSettings(window_ms=window_ms))
        decisions = state.observe_batch(ev["timestamp"], ev["producer_id"], np.full(len(ev), -1))
        rows += [(principal, d.producer_id, d.timestamp, d.verdict, d.throttle_time_ms) for d in decisions]
        totals[principal] = state.throttled_total
    decisions = pd.DataFrame(
        rows, columns=["principal", "producer_id", "timestamp", "verdict", "throttle_time_ms"]
    )
    summary = rec.what_if_summary(decisions).set_index("principal")
    assert summary["throttles"].to_dict() == {p: n for p, n in totals.items() if p in summary.index}
    assert summary.loc["User:crash-loop", "throttles"] > 0
    assert summary.loc["User:steady-orders", "throttles"] == 0


# -- the what-if frames ---------------------------------------------------------------------


def decisions_frame(*rows) -> pd.DataFrame:
    return pd.DataFrame(
        list(rows), columns=["principal", "producer_id", "timestamp", "verdict", "throttle_time_ms"]
    )


def test_what_if_summary_by_hand():
    d = decisions_frame(
        ("User:a", 1, 1000, "ADMIT", 0),
        ("User:a", 2, 2000, "THROTTLE", 500),
        ("User:a", 3, 1500, "THROTTLE", 9000),
        ("User:a", 3, 4000, "THROTTLE", 200),
        ("User:b", 9, 100, "ADMIT", 0),
    )
    s = rec.what_if_summary(d)
    assert list(s.columns) == list(rec.WHAT_IF_COLUMNS)
    a, b = s.to_dict("records")
    assert a == {
        "principal": "User:a",
        "throttles": 3,  # decisions
        "throttled_pids": 2,  # PIDs 2 and 3
        "new_pids": 3,  # PIDs 1, 2 and 3 were judged
        "first_throttle_ms": 1500,
        "longest_throttle_ms": 9000,
    }
    assert b["principal"] == "User:b" and b["throttles"] == 0 and b["throttled_pids"] == 0
    assert b["new_pids"] == 1
    assert pd.isna(b["first_throttle_ms"]) and pd.isna(b["longest_throttle_ms"])


SAMPLE_SUMMARY = [
    ("User:crash-loop", 12, 5, 650, 1_767_225_605_250, 36_000),
    ("User:steady", 0, 0, 40, None, None),
]


def sample_stats() -> pd.DataFrame:
    """Three users: steady and o'neil long-lived, crash-loop short-lived and far above them."""
    return pd.DataFrame(
        [
            ("User:steady", 1.0, 1.0, 1, 40, 40, 0, 0),
            ("User:crash-loop", 60.0, 70.5, 150, 700, 650, 640, 0),
            ("User:o'neil two", 2.0, 3.2, 4, 9, 9, 0, 0),
        ],
        columns=list(rec.STATS_COLUMNS),
    )


def sample_usage() -> pd.DataFrame:
    return rec.with_suggestions(sample_stats(), 2.0)


def sample_plan(share: float = 0.6, headroom: float = 2.0) -> floods.Plan:
    usage = rec.with_suggestions(sample_stats(), headroom)
    return floods.plan(usage, headroom, share, rec.DEFAULT_SHORT_LIFE_MS, 10.0)


def sample_summary() -> pd.DataFrame:
    frame = pd.DataFrame(SAMPLE_SUMMARY, columns=list(rec.WHAT_IF_COLUMNS))
    return frame.astype({"first_throttle_ms": "Int64", "longest_throttle_ms": "Int64"})


def test_what_if_view_resolves_quotas_like_the_enforcer():
    usage = sample_usage()
    view = rec.what_if_view(usage, sample_summary(), {"User:crash-loop": 60}).set_index("principal")
    assert view.loc["User:crash-loop", "quota"] == 60 and view.loc["User:crash-loop", "throttles"] == 12
    assert (
        view.loc["User:crash-loop", "throttled_pids"] == 5 and view.loc["User:crash-loop", "new_pids"] == 650
    )
    assert view.loc["User:steady", "quota"] is None and view.loc["User:steady", "throttles"] == 0
    assert view.loc["User:o'neil two", "new_pids"] == 0  # no row in the summary
    view = rec.what_if_view(usage, sample_summary(), {"<default>": 5}).set_index("principal")
    assert view.loc["User:steady", "quota"] == 5


# -- rendering ------------------------------------------------------------------------------


def rendered_parts():
    plan = sample_plan()
    what_if = rec.what_if_view(plan.usage, sample_summary(), {"User:crash-loop": 60, "<default>": 5})
    return plan, what_if, rec.Basis(3_600_000, 900_000, 2.0)


def test_suggestions_floods_and_default_of_the_sample():
    plan, _, _ = rendered_parts()
    by_user = plan.usage.set_index("principal")
    assert by_user["suggested"].to_dict() == {"User:steady": 2, "User:crash-loop": 141, "User:o'neil two": 7}
    # crash-loop: 640 of 650 PIDs short-lived, max 150 > 10 x median(1, 4) = 25
    assert by_user["flood"].to_dict() == {
        "User:steady": False,
        "User:crash-loop": True,
        "User:o'neil two": False,
    }
    assert plan.fleet.median_peak == 2.5 and by_user.loc["User:crash-loop", "peak_ratio"] == 60
    # the default from steady and o'neil only: max x 2 = 2, 8; k = ceil(0.6 x 2) = 2 -> 8
    assert plan.default == rec.DefaultSuggestion(rate=8, share=0.6, users=2, covered=2, floods=1)
    # crash-loop is held at min(8, 150 // 2); o'neil's own max(7, 4) = 7 is under the default
    assert plan.quotas() == {"<default>": 8, "User:crash-loop": 8}


def test_table_without_what_if():
    plan, _, basis = rendered_parts()
    lines = output.table(plan, basis).splitlines()
    assert re.split(r"\s{2,}", lines[0]) == [
        "principal",
        "p50/W",
        "p99/W",
        "max/W",
        "active PIDs",
        "short-lived",
        "1 request",
        "x median",
        "suggested",
    ]
    assert [line.split()[0] for line in lines[1:4]] == ["User:crash-loop", "User:o'neil", "User:steady"]
    assert lines[1].split()[1:] == ["60.00", "70.50", "150", "700", "98%", "0%", "60.0x", "8", "FLOOD"]
    assert lines[2].split()[2:] == ["2.00", "3.20", "4", "9", "0%", "0%", "1.6x", "<default>"]
    assert len({len(line) for line in lines[1:4]}) == 1  # aligned
    text = "\n".join(lines)
    assert "W = 3600 s" in text and "every 900 s" in text and "linear" in text
    assert "lived under 300 s" in text and "fleet median 2.5" in text
    assert "Suspected floods (1):" in text
    assert (
        "  User:crash-loop: 98% of 650 PIDs lived under 300 s, 0% in one request; peak 150 new PIDs per W, "
        "60.0x the fleet median 2.5; quota 8" in lines
    )
    assert "Suggested <default>: 8 (" in text and "from the 2 users that are not suspected floods" in text
    assert "2 of them have max/W <= 8" in text
    assert lines[-1] == "Nothing was applied."


def test_table_says_when_no_life_could_be_judged():
    stats = sample_stats().assign(judged_pids=0, short_lived_pids=0)
    usage = rec.with_suggestions(stats, 2.0)
    plan = floods.plan(usage, 2.0, 0.9, rec.DEFAULT_SHORT_LIFE_MS, 10.0)
    assert not plan.usage["flood"].any() and plan.fleet.judged is False
    text = output.table(plan)
    assert "No PID's life could be judged (the input must span more than 2 x 300 s" in text
    assert "No user is a suspected flood." in text


def test_table_with_what_if():
    plan, what_if, basis = rendered_parts()
    lines = output.table(plan, basis, what_if).splitlines()
    assert re.split(r"\s{2,}", lines[0])[-5:] == [
        "quota",
        "throttles",
        "throttled/new PIDs",
        "first throttle (UTC)",
        "longest throttle (s)",
    ]
    assert lines[1].endswith(
        "60         12               5/650  2026-01-01 00:00:05.250                36.000"
    )
    assert lines[3].split()[-5:] == ["5", "0", "0/40", "-", "-"]
    assert "It throttles 1 of 1 suspected floods and 0 other users." in lines


def test_json_is_one_document_with_stable_keys():
    plan, what_if, basis = rendered_parts()
    doc = json.loads(output.to_json(plan, basis, what_if))
    assert doc["applied"] is False
    assert doc["basis"] == {
        "window_ms": 3_600_000,
        "slide_ms": 900_000,
        "headroom": 2.0,
        "short_life_ms": 300_000,
        "flood_factor": 10.0,
    }
    assert doc["default"] == {"rate": 8, "share": 0.6, "users": 2, "covered": 2, "floods": 1}
    assert doc["fleet"] == {
        "short_life_ms": 300_000,
        "flood_factor": 10.0,
        "median_peak": 2.5,
        "judged": True,
    }
    assert doc["floods"] == [
        {
            "principal": "User:crash-loop",
            "quota": 8,
            "evidence": "98% of 650 PIDs lived under 300 s, 0% in one request; peak 150 new PIDs per W, "
            "60.0x the fleet median 2.5",
        }
    ]
    assert set(doc["rules"]) == {"suggested", "default", "percentiles", "flood", "quota"}
    assert [u["principal"] for u in doc["users"]] == ["User:crash-loop", "User:o'neil two", "User:steady"]
    assert {frozenset(u) for u in doc["users"]} == {frozenset([*rec.USAGE_COLUMNS, "what_if"])}
    crash = doc["users"][0]
    assert crash["suggested"] == 141 and crash["fits"] is False and crash["p99"] == 70.5
    assert crash["flood"] is True and crash["quota"] == 8 and crash["short_lived"] == 640 / 650
    assert crash["what_if"] == {
        "quota": 60,
        "throttles": 12,
        "throttled_pids": 5,
        "new_pids": 650,
        "first_throttle_ms": 1_767_225_605_250,
        "first_throttle_utc": "2026-01-01 00:00:05.250",
        "longest_throttle_ms": 36_000,
    }
    assert doc["users"][2]["what_if"]["first_throttle_ms"] is None and doc["users"][2]["quota"] is None
    plain = json.loads(output.to_json(plan))
    assert plain["basis"] is None and all(u["what_if"] is None for u in plain["users"])


def test_the_plan_script_names_each_flood_with_its_evidence():
    script = output.plan_script(sample_plan())
    lines = script.splitlines()
    alter = 'pidquota configs "$@" --alter --entity-type users'
    assert lines[-3:] == [
        f"{alter} --entity-default --add-config producer_ids_rate=8",
        "# User:crash-loop: suspected flood, held at 8 (no raise): 98% of 650 PIDs lived under 300 s, "
        "0% in one request; peak 150 new PIDs per W, 60.0x the fleet median 2.5",
        f"{alter} --entity-name User:crash-loop --add-config producer_ids_rate=8",
    ]


def test_a_comment_cannot_end_early():
    script = output.configs_script({"User:a\nrm -rf x": 3}, None, comments={"User:a\nrm -rf x": "flood"})
    assert "# User:a?rm -rf x: flood" in script.splitlines()


def test_configs_script_lines():
    script = output.configs_script({"User:b": 7, "User:o'neil two": 2.5}, 8)
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh" and "Nothing has been applied." in lines[1]
    assert any("REDIS=redis://HOST:PORT/DB" in x for x in lines) and any(
        "pidquota.redis.url" in x for x in lines
    )
    alter = 'pidquota configs "$@" --alter --entity-type users'
    assert lines[-3:] == [
        f"{alter} --entity-default --add-config producer_ids_rate=8",
        f"{alter} --entity-name User:b --add-config producer_ids_rate=7",
        f"{alter} --entity-name 'User:o'\"'\"'neil two' --add-config producer_ids_rate=2.5",
    ]
    with pytest.raises(ValueError, match="<default> is given as default="):
        output.configs_script({"<default>": 3}, None)


@pytest.mark.parametrize(
    "env, flags",
    [
        ({}, []),  # REDIS unset, the placeholder empty: pidquota.redis.url
        ({"REDIS": ""}, []),
        ({"REDIS": "redis://h:1/2"}, ["--redis", "redis://h:1/2"]),
    ],
)
def test_configs_script_runs_in_sh(tmp_path, env, flags):
    """The script, run by /bin/sh against a stand-in ``pidquota`` that records its arguments."""
    log = tmp_path / "calls"
    fake = tmp_path / "bin" / "pidquota"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s|" "$a"; done >> {log}\necho >> {log}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    script = tmp_path / "apply.sh"
    script.write_text(output.configs_script({"User:o'neil two": 3, "User:$(x)": 4}, 8))
    base = {k: v for k, v in os.environ.items() if k != "REDIS"}
    r = subprocess.run(
        ["sh", str(script)],
        env={**base, **env, "PATH": f"{fake.parent}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    calls = [line.split("|")[:-1] for line in log.read_text().splitlines()]
    head = ["configs", *flags, "--alter", "--entity-type", "users"]
    assert calls == [
        [*head, "--entity-default", "--add-config", "producer_ids_rate=8"],
        [*head, "--entity-name", "User:$(x)", "--add-config", "producer_ids_rate=4"],
        [*head, "--entity-name", "User:o'neil two", "--add-config", "producer_ids_rate=3"],
    ]


def test_configs_script_placeholder_is_used_when_redis_is_unset(tmp_path):
    script = output.configs_script({}, 5, "redis://x:6379/0")
    assert "then REDIS=redis://x:6379/0; fi" in script


# -- the command line -----------------------------------------------------------------------


@pytest.fixture
def input_file(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"timestamp": 0, "principal": "User:a", "producer_id": 1}\n')
    return path


@pytest.fixture
def computed(monkeypatch):
    """``recommend_job.compute`` replaced: records its arguments (a function of the statistics
    given as the quotas is called with them, as the job does, and its result recorded), returns
    the sample's frames."""
    calls = []

    def compute(input_path, config, quotas, short_life_ms=rec.DEFAULT_SHORT_LIFE_MS, say=None):
        if callable(short_life_ms):  # fitted to the input's span: the sample spans hours
            short_life_ms = short_life_ms(4 * 3_600_000)
        stats = sample_stats()
        asked = quotas(stats) if callable(quotas) else quotas
        calls.append((input_path, config, asked, short_life_ms, callable(quotas)))
        return stats, (sample_summary() if quotas is not None else None)

    monkeypatch.setattr("pidquota.recommend.job.compute", compute)
    return calls


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--headroom", "0"], "--headroom: headroom must be a number > 0, got 0.0"),
        (["--headroom", "lots"], "--headroom 'lots' is not a number"),
        (["--headroom", "inf"], "--headroom: headroom must be a number > 0, got inf"),
        (["--default-share", "1.5"], r"--default-share: share of users must be in (0, 1], got 1.5"),
        (["--default-share", "0"], r"--default-share: share of users must be in (0, 1], got 0.0"),
        (["--short-life", "0"], "--short-life: short life must be a number of seconds > 0, got 0.0"),
        (["--short-life", "5m"], "--short-life '5m' is not a number"),
        (["--flood-factor", "0.5"], "--flood-factor: flood factor must be a number >= 1, got 0.5"),
        (["--what-if", "a=1", "--no-what-if"], "--what-if and --no-what-if contradict each other"),
        (["--what-if", "Group:x=1"], "--what-if: user entity name 'Group:x' names a 'Group' principal"),
        (["--what-if", "User:a=0"], "--what-if: producer_ids_rate for 'User:a' must be a positive number"),
        (["--what-if", "/no/such/quotas.json"], "cannot read quota file '/no/such/quotas.json'"),
        (["--json", "--emit-configs"], "--json and --emit-configs both write to stdout"),
        (["--emit-configs", "/no/such/dir/apply.sh"], "--emit-configs '/no/such/dir/apply.sh': give a file"),
        (["--set", "producer.id.quota.window.nums=3"], "unknown setting 'producer.id.quota.window.nums'"),
    ],
)
def test_bad_flags_give_one_line_and_exit_2_before_reading(flags, message, input_file, computed, capsys):
    assert main(["recommend", "--input", str(input_file), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pidquota: error: ") and message in err, err
    assert len(err.splitlines()) == 1
    assert computed == []


@pytest.mark.parametrize(
    "given, message",
    [
        ("/no/such/events.jsonl", "input '/no/such/events.jsonl' does not exist"),
        ("kafka://nohost", "'kafka://nohost' is not a Kafka URL"),
    ],
)
def test_bad_input_is_refused_before_reading(given, message, computed, capsys):
    assert main(["recommend", "--input", given]) == 2
    assert message in capsys.readouterr().err
    assert computed == []


def test_recommend_prints_the_table_and_the_what_if_of_its_own_suggestion(input_file, computed, capsys):
    assert main(["recommend", "--input", str(input_file)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith("User:crash-loop")
    # share 0.9 of the 2 users that are not floods: k = 2, 4 x 2 = 8 (crash-loop's 150 left out)
    assert "Suggested <default>: 8 (" in out
    path, config, quotas, short_life_ms, deferred = computed[0]
    assert path == str(input_file) and short_life_ms == 300_000
    assert deferred and quotas == {"<default>": 8, "User:crash-loop": 8}  # made from the statistics
    assert config["producer.id.quota.window.size.seconds"] == 3600
    assert "It throttles 1 of 1 suspected floods and 0 other users." in out


def test_recommend_without_what_if(input_file, computed, capsys):
    flags = ["--no-what-if", "--short-life", "60", "--flood-factor", "100"]
    assert main(["recommend", "--input", str(input_file), *flags]) == 0
    out = capsys.readouterr().out
    assert computed[0][2] is None and computed[0][3] == 60_000
    assert "throttles" not in out.splitlines()[0]
    assert "No user is a suspected flood." in out  # 150 is not over 100 x 2.5
    assert "Suggested <default>: 300 (" in out


def test_recommend_what_if_spec_and_headroom(input_file, computed, capsys):
    flags = ["--what-if", "crash-loop=60,<default>=5", "--headroom", "3", "--default-share", "0.5", "--json"]
    assert main(["recommend", "--input", str(input_file), *flags]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert computed[0][2] == {"User:crash-loop": 60, "<default>": 5} and not computed[0][4]
    # the default from steady (3) and o'neil (12): k = ceil(0.5 x 2) = 1 -> 3
    assert doc["basis"]["headroom"] == 3.0 and doc["default"]["rate"] == 3
    crash, oneil, steady = doc["users"]
    assert crash["suggested"] == 212 and crash["what_if"]["throttles"] == 12  # ceil(70.5 x 3)
    assert crash["quota"] == 3 and oneil["quota"] == 10  # held at the default; max(ceil(9.6), 4)
    assert steady["what_if"] == {
        "quota": 5,
        "throttles": 0,
        "throttled_pids": 0,
        "new_pids": 40,
        "first_throttle_ms": None,
        "first_throttle_utc": None,
        "longest_throttle_ms": None,
    }


def test_recommend_what_if_takes_a_quota_file(input_file, computed, capsys):
    assert main(["recommend", "--input", str(input_file), "--what-if", str(CONF_QUOTAS)]) == 0
    assert computed[0][2] == {"<default>": 200, "User:crash-loop": 60, "User:per-batch": 60}
    assert "first throttle (UTC)" in capsys.readouterr().out


def test_recommend_emits_the_configs_script_to_stdout_and_the_table_to_stderr(input_file, computed, capsys):
    assert main(["recommend", "--input", str(input_file), "--emit-configs", "--default-share", "0.6"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("#!/bin/sh\n")
    # the <default> (8), and the flood held at it, named
    assert captured.out.splitlines()[-3:] == [
        'pidquota configs "$@" --alter --entity-type users --entity-default --add-config producer_ids_rate=8',
        "# User:crash-loop: suspected flood, held at 8 (no raise): 98% of 650 PIDs lived under 300 s, "
        "0% in one request; peak 150 new PIDs per W, 60.0x the fleet median 2.5",
        'pidquota configs "$@" --alter --entity-type users --entity-name User:crash-loop '
        "--add-config producer_ids_rate=8",
    ]
    assert captured.err.startswith("principal")


def test_recommend_writes_the_configs_script_to_a_file(input_file, computed, capsys, tmp_path):
    target = tmp_path / "apply.sh"
    assert main(["recommend", "--input", str(input_file), "--emit-configs", str(target)]) == 0
    captured = capsys.readouterr()
    assert target.read_text().startswith("#!/bin/sh\n") and os.access(target, os.X_OK)
    assert captured.out.startswith("principal")
    assert f"wrote {target}; nothing applied" in captured.err
