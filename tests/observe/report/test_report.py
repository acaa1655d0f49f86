"""``pidquota report`` and the per-user run summary, on small output folders written the way
the sink writes them. No Spark."""

import base64
import json
import re
import struct
import sys

import pandas as pd
import pyarrow as pa
import pytest

from pidquota.cli.main import main
from pidquota.observe.report import data as rd
from pidquota.observe.report import series as rs
from pidquota.observe.report.html import MAX_ROWS, dead_letters_html, render
from pidquota.quota import ADMIT, THROTTLE, PrincipalQuota, QuotaSettings
from pidquota.streaming.columns import OUTPUTS
from pidquota.streaming.outputs.sink import write_jsonl

T0 = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC
W = 60_000


def judge(rate: float, events: list[tuple[int, int]], window_ms: int = W) -> list[dict]:
    """Decision rows of the real contract for ``(ms after T0, PID)`` events of one user."""
    quota = PrincipalQuota(rate, QuotaSettings(window_ms=window_ms), T0)
    decisions = (quota.observe(T0 + t, pid) for t, pid in events)
    return [
        {
            "producer_id": d.producer_id,
            "producer_epoch": d.producer_epoch,
            "timestamp": d.timestamp,
            "verdict": d.verdict,
            "throttle_time_ms": d.throttle_time_ms,
            "tokens": d.tokens,
            "quota": float(rate),
        }
        for d in decisions
        if d is not None
    ]


def write_run(out, batches: dict[int, dict[str, list[dict]]]) -> None:
    """``{batch_id: {output name: rows}}`` as the sink writes them: one file per output and
    batch, the schema's columns (null where a row has none), then ``batch_id``."""
    for batch_id, outputs in batches.items():
        for name, rows in outputs.items():
            columns = list(OUTPUTS[name][1])
            columns += dict.fromkeys(c for r in rows for c in r if c not in columns)
            table = pa.Table.from_pylist(
                [{c: r.get(c) for c in columns} | {"batch_id": batch_id} for r in rows]
            )
            table = table.cast(pa.schema([pa.field(f.name, f.type if f.type != pa.null() else pa.string())
                                          for f in table.schema]))  # fmt: skip
            (out / name).mkdir(parents=True, exist_ok=True)
            write_jsonl(table, out / name / f"part-{batch_id:010d}.jsonl")


def rows(user: str, decisions: list[dict], **more) -> list[dict]:
    return [{"principal": user, **d, **more} for d in decisions]


# alice, quota 2 per W = 60 s (the contract's own example): PIDs 1, 2, 3 at 0 s give ADMIT,
# ADMIT, THROTTLE 30000 ms; PIDs 3 and 4 at 10 s wait 20000 ms each (1/3 token back); PID 3
# at 30 s is admitted. So: 4 distinct new PIDs, 3 throttles, the longest 30 s, first at
# 00:00:00, last at 00:00:10. Split over two batches.
ALICE = judge(2, [(0, 1), (0, 2), (0, 3), (10_000, 3), (10_000, 4), (30_000, 3)])
# bob, quota 100: two new PIDs, both admitted.
BOB = judge(100, [(5_000, 10), (6_000, 11)])
# dave: throttled while a --replay-until replay rebuilt state only, then one live metrics row.
DAVE = judge(1, [(1_000, 20), (2_000, 21)])


@pytest.fixture
def run_dir(tmp_path):
    out = tmp_path / "out"
    assert [d["verdict"] for d in ALICE] == [ADMIT, ADMIT, THROTTLE, THROTTLE, THROTTLE, ADMIT]
    assert [d["throttle_time_ms"] for d in ALICE] == [0, 0, 30_000, 20_000, 20_000, 0]
    write_run(
        out,
        {
            0: {
                "decisions": rows("User:alice", ALICE[:3]) + rows("User:dave", DAVE, replay=True),
                "metrics": [
                    {
                        "principal": "User:alice",
                        "timestamp": T0,
                        "quota": 2.0,
                        "rate": 2.0,
                        "tokens": 0.0,
                        "events": 7,
                    },
                    {"principal": "User:carol", "timestamp": T0, "quota": 5.0, "events": 4},  # PID < 0 only
                    {
                        "principal": "User:dave",
                        "timestamp": T0 + 2_000,
                        "quota": 1.0,
                        "rate": 1.0,
                        "tokens": 0.0,
                        "events": 2,
                        "replay": True,
                    },
                ],
            },
            1: {
                "decisions": rows("User:alice", ALICE[3:]) + rows("User:bob", BOB),
                "metrics": [
                    {
                        "principal": "User:alice",
                        "timestamp": T0 + 30_000,
                        "quota": 2.0,
                        "rate": 3.0,
                        "tokens": 0.0,
                        "events": 9,
                    },
                    {
                        "principal": "User:bob",
                        "timestamp": T0 + 6_000,
                        "quota": 100.0,
                        "rate": 2.0,
                        "tokens": 98.0,
                        "events": 20,
                    },
                    {
                        "principal": "User:dave",
                        "timestamp": T0 + 40_000,
                        "quota": 1.0,
                        "rate": 1.0,
                        "tokens": 1.0,
                        "events": 1,
                    },
                ],
                "dead-letters": [
                    {"raw": "{", "reason": "not valid JSON", "source": "f"},
                    {"raw": "x", "reason": "not valid JSON", "source": "f"},
                    {"raw": "{}", "reason": "missing required field 'timestamp'", "source": "f"},
                ],
            },
        },
    )
    return out


EXPECTED = pd.DataFrame(
    {
        "user": ["User:alice", "User:bob", "User:carol", "User:dave"],
        "new_pids": [4, 2, 0, 0],
        "throttles": [3, 0, 0, 0],
        "longest_throttle_ms": pd.array([30_000, None, None, None], dtype="Int64"),
        "first_throttle_ms": pd.array([T0, None, None, None], dtype="Int64"),
        "last_throttle_ms": pd.array([T0 + 10_000, None, None, None], dtype="Int64"),
        "client": ["", "", "", ""],  # these decisions name no client
    }
)
SUMMARY = (
    "throttled user        new PIDs  throttles      longest\n"
    "User:alice                   4          3         30 s\n"
    "3 other users, none throttled"
)


def test_offenders_table_counts_by_hand(run_dir):
    run = rd.load_run(run_dir)
    pd.testing.assert_frame_equal(rd.offenders(run.decisions, run.metrics), EXPECTED, check_dtype=False)


def test_run_summary_fed_by_batch_is_the_report_table(run_dir):
    summary = rd.RunSummary()
    for batch_id in (0, 1):
        # what the sink passes to on_batch: one batch's rows, in pandas' nullable types
        frames = {name: rd.read_output(run_dir, name) for name in OUTPUTS}
        summary.add(
            {k: f[f["batch_id"] == batch_id].convert_dtypes() if len(f) else f for k, f in frames.items()}
        )
    pd.testing.assert_frame_equal(summary.offenders.table(), EXPECTED, check_dtype=False)
    assert summary.render() == SUMMARY


def test_the_sinks_arrow_batches_give_the_same_summary_and_never_become_pandas(run_dir):
    """What the sink hands on_batch (``BatchFrames``: Arrow rows, pandas only when read): the
    summary counts the Arrow rows themselves, replayed ones left out as in pandas, and the
    decisions of a flood batch are never turned into a pandas frame."""
    from pidquota.streaming.outputs.sink import BatchFrames

    summary, batches = rd.RunSummary(), []
    for batch_id in (0, 1):
        frames = {name: rd.read_output(run_dir, name) for name in OUTPUTS}
        parts = {
            k: pa.Table.from_pandas(f[f["batch_id"] == batch_id] if len(f) else f, preserve_index=False)
            for k, f in frames.items()
        }
        batches.append(BatchFrames(parts))
        summary.add(batches[-1])
    pd.testing.assert_frame_equal(summary.offenders.table(), EXPECTED, check_dtype=False)
    assert summary.render() == SUMMARY
    assert all("decisions" not in b._frames and "metrics" not in b._frames for b in batches)


def test_offenders_from_arrow_and_from_pandas_agree_on_random_batches():
    """Random batches with nulls, replays, PIDs seen again across batches and many clients:
    the table is the same whether each batch comes as an Arrow table or a pandas frame, and its
    counts are those of a plain Python count of the live rows."""
    import numpy as np

    rng = np.random.default_rng(55)
    from_arrow, from_pandas, seen = rd.Offenders(), rd.Offenders(), []
    for _ in range(6):
        n = int(rng.integers(0, 400))
        frame = pd.DataFrame(
            {
                "principal": rng.choice(["User:a", "User:b", "User:c", None], n),
                "producer_id": rng.integers(0, 300, n),
                "verdict": rng.choice([ADMIT, THROTTLE, THROTTLE, "OTHER"], n),
                "throttle_time_ms": rng.integers(0, 10_000, n),
                "timestamp": rng.integers(0, 10**6, n),
                "client_id": rng.choice([f"app-{k}" for k in range(5)] + [None, ""], n),
                "client_address": rng.choice(["10.0.0.1", "10.0.0.2", None], n),
                "replay": rng.random(n) < 0.1,
            }
        ).convert_dtypes()
        seen.append(frame)
        from_pandas.add(rd.live(frame))
        from_arrow.add(rd.live_table(pa.Table.from_pandas(frame, preserve_index=False)))
    pd.testing.assert_frame_equal(from_arrow.table(), from_pandas.table())
    assert from_arrow.table()["throttles"].sum() > 0 and from_arrow.table()["client"].str.len().min() > 0
    # and the counts, row by row in plain Python (an independent reference)
    want: dict = {}
    for r in pd.concat(seen).itertuples():
        if r.replay or r.verdict not in (ADMIT, THROTTLE) or r.principal is pd.NA:
            continue
        pids, n, longest, first, last = want.setdefault(r.principal, [set(), 0, None, None, None])
        pids.add(r.producer_id)
        if r.verdict == THROTTLE:
            longest = r.throttle_time_ms if longest is None else max(longest, r.throttle_time_ms)
            first = r.timestamp if first is None else min(first, r.timestamp)
            last = r.timestamp if last is None else max(last, r.timestamp)
            want[r.principal][1:] = [n + 1, longest, first, last]
    got = from_arrow.table().set_index("user")
    for user, (pids, n, longest, first, last) in want.items():
        assert (got.new_pids[user], got.throttles[user]) == (len(pids), n), user
        if n:
            assert (
                got.longest_throttle_ms[user],
                got.first_throttle_ms[user],
                got.last_throttle_ms[user],
            ) == (longest, first, last), user


def test_summary_without_throttles_is_one_line():
    summary = rd.RunSummary()
    assert summary.render() == "no users"
    summary.add(
        {"decisions": pd.DataFrame(rows("User:bob", BOB)), "metrics": pd.DataFrame(), "dead-letters": None}
    )
    assert summary.render() == "1 user, none throttled"


def test_summary_shows_the_top_throttled_and_counts_the_rest():
    many = pd.DataFrame(
        [r for k in range(4) for r in rows(f"User:u{k}", judge(1, [(t, t) for t in range(k + 2)]))]
    )  # u0..u3 with 2..5 new PIDs: 1..4 throttles
    summary = rd.RunSummary(top=2)
    summary.add({"decisions": many})
    lines = summary.render().splitlines()
    assert [line.split()[:3] for line in lines[1:3]] == [["User:u3", "5", "4"], ["User:u2", "4", "3"]]
    assert lines[3] == "2 other users, 2 of them throttled (3 throttles)"


def test_each_offender_is_named_by_its_most_throttled_client():
    crash = dict(client_id="crash-app", client_address="10.0.0.5", client_software="librdkafka 2.6.1")
    decisions = judge(1, [(t, t) for t in range(5)])  # 1 ADMIT, 4 THROTTLE
    named = [d | (crash if d["verdict"] == THROTTLE else {"client_id": "deploy"}) for d in decisions]
    summary = rd.RunSummary()
    summary.add({"decisions": pd.DataFrame(rows("User:crash", named))})
    header, line = summary.render().splitlines()
    assert header.endswith("  client")
    assert line.endswith("  client.id crash-app (librdkafka 2.6.1) at 10.0.0.5, +1 other client")
    table = rd.offenders(pd.DataFrame(rows("User:crash", named)))
    assert table["client"].tolist() == ["client.id crash-app (librdkafka 2.6.1) at 10.0.0.5, +1 other client"]


def test_a_users_clients_are_told_apart_up_to_a_bound(monkeypatch):
    monkeypatch.setattr(rd.Offenders, "MAX_CLIENTS", 3)
    decisions = judge(100, [(t, t) for t in range(6)])
    named = [d | {"client_id": f"app-{i}"} for i, d in enumerate(decisions)]
    table = rd.offenders(pd.DataFrame(rows("User:many", named)))
    assert table["client"].tolist() == ["client.id app-2, +3 other clients"]  # 3 apart, the rest as one


def test_header(run_dir):
    h = rd.header(rd.load_run(run_dir))
    assert (h.start_ms, h.end_ms) == (T0, T0 + 40_000)
    assert (h.batches, h.decisions, h.metric_rows, h.dead_letters) == (2, 10, 6, 3)
    assert h.events == 7 + 4 + 2 + 9 + 20 + 1
    assert h.replayed_decisions == 2 and h.window_ms == W


@pytest.mark.parametrize("window_ms", [1_000, 60_000, 3_600_000, 7 * 86_400_000])
@pytest.mark.parametrize("rate", [0.5, 3, 60, 1000])
def test_the_window_is_read_back_from_the_throttles(window_ms, rate):
    # a burst of new PIDs, then one a second: throttles with every amount of tokens
    events = [(0, p) for p in range(int(rate) + 5)] + [(1000 * k, 10_000 + k) for k in range(1, 200)]
    decisions = pd.DataFrame(judge(rate, events, window_ms))
    assert (decisions["verdict"] == THROTTLE).sum() > 0
    assert rd.window_ms(decisions) == window_ms


def test_no_window_without_throttles_or_with_two():
    assert rd.window_ms(pd.DataFrame(BOB)) is None
    assert rd.window_ms(pd.DataFrame()) is None
    burst = [(0, p) for p in range(8)]
    two = pd.DataFrame(judge(2, burst, 60_000) + judge(2, burst, 3_600_000))
    assert rd.window_ms(two) is None


def test_throttles_are_binned_over_event_time(run_dir):
    run = rd.load_run(run_dir)
    # 40 s of event time: 1 s bins; alice's throttles at 0 s (one) and 10 s (two)
    bins = rs.throttle_bins(run.decisions, ["User:alice", "User:bob"], T0, T0 + 40_000)
    assert bins.attrs["bin_ms"] == 1_000 and len(bins) == 41
    assert bins.loc[rd.utc(T0), "User:alice"] == 1 and bins.loc[rd.utc(T0 + 10_000), "User:alice"] == 2
    assert bins["User:alice"].sum() == 3 and bins["User:bob"].sum() == 0


@pytest.mark.parametrize(
    "start_min, end_min, expected",
    [(3, 179, (0, 5, 36)), (0, 60, (0, 1, 61)), (61, 61, (61, 1 / 60, 1)), (0, 10 * 24 * 60, (0, 360, 41))],
)
def test_bins_have_round_widths(start_min, end_min, expected):
    first, width, count = rs.bins(start_min * 60_000, end_min * 60_000)
    assert (first / 60_000, width / 60_000, count) == pytest.approx(expected)


def test_token_peaks_are_the_most_in_each_bin(run_dir):
    run = rd.load_run(run_dir)
    peaks = rs.token_peaks(run.decisions, run.metrics, ["User:alice"], T0, T0 + 40_000)
    # 40 s in at most 300 bins: 1 s. At 0 s: 1 token after the first ADMIT, 0 after the second
    # and the THROTTLE; at 10 s: 1/3 (both THROTTLEs); at 30 s: 0 after the ADMIT.
    assert peaks.attrs["bin_ms"] == 1_000
    assert peaks.loc[rd.utc(T0), "User:alice"] == pytest.approx(1.0)
    assert peaks.loc[rd.utc(T0 + 10_000), "User:alice"] == pytest.approx(1 / 3)
    assert peaks.loc[rd.utc(T0 + 30_000), "User:alice"] == pytest.approx(0.0)
    assert peaks["User:alice"].isna().sum() == len(peaks) - 3  # 0 s, 10 s, 30 s


@pytest.mark.parametrize(
    "ms, text",
    [
        (None, "-"),
        (850, "850 ms"),
        (1_000, "1 s"),
        (17_800, "17.8 s"),
        (250_000, "4 min 10 s"),
        (3_600_000, "1 h"),
        (7_500_000, "2 h 5 min"),
    ],
)
def test_durations_for_people(ms, text):
    assert rd.format_ms(ms) == text


def test_dead_letters_by_reason_and_class(run_dir):
    reasons = rs.dead_letter_reasons(rd.load_run(run_dir).dead)
    assert reasons.values.tolist() == [
        ["not_json", "not valid JSON", 2],
        ["missing_field", "missing required field 'timestamp'", 1],
    ]
    assert rs.dead_letter_classes(reasons).values.tolist() == [["not_json", 2], ["missing_field", 1]]
    assert rs.dead_letter_files(rd.load_run(run_dir).dead).values.tolist() == [["f", 3]]


def test_dead_letters_by_file_the_most_first_and_none_for_kafka():
    dead = pd.DataFrame(
        {"source": ["file:///in/a.jsonl", "file:/in/b.jsonl", "file:/in/b.jsonl", "topic/0@7", None]}
    )
    assert rs.dead_letter_files(dead).values.tolist() == [["/in/b.jsonl", 2], ["/in/a.jsonl", 1]]
    assert "<td>/in/b.jsonl</td><td class=n>2</td>" in dead_letters_html(dead.assign(reason="not valid JSON"))


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


def test_the_report_is_one_html_file_with_its_plots_inside(run_dir, capsys):
    before = sorted(p for p in run_dir.rglob("*"))
    assert main(["report", str(run_dir)]) == 0
    page = run_dir / "report.html"
    assert sorted(p for p in run_dir.rglob("*")) == sorted([*before, page])
    out = capsys.readouterr().out
    assert out == f"{SUMMARY}\npidquota: wrote {page} ({page.stat().st_size // 1024} KiB)\n"
    text = page.read_text(encoding="utf-8")
    images = re.findall(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) == 3 == text.count("<img ")
    assert all(png_size(base64.b64decode(i)) == (900, 350) for i in images)
    for external in ("http:", "https:", "<link", "<script", "url(", "@import", "file:"):
        assert external not in text
    assert all(src.startswith("data:image/png;base64,") for src in re.findall(r'src="([^"]*)"', text))
    cells = "<td>User:alice</td><td class=n>4</td><td class=n>3</td><td class=n>30 s</td>"
    assert cells + "<td>2026-01-01 00:00:00 UTC</td><td>2026-01-01 00:00:10 UTC</td>" in text
    assert "3 other users, none throttled" in text and "1 min" in text  # W = 60 s
    assert "2 (before --replay-until; not counted below)" in text


def test_report_to_another_file_escapes_names(tmp_path, capsys):
    out = tmp_path / "out"
    evil = "User:<b>&co"
    write_run(out, {0: {"decisions": rows(evil, ALICE), "metrics": [metric_row(evil)]}})
    target = tmp_path / "elsewhere" / "r.html"
    target.parent.mkdir()
    assert main(["report", str(out), "--html", str(target)]) == 0
    assert not (out / "report.html").exists()
    text = target.read_text(encoding="utf-8")
    assert "<b>" not in text and "User:&lt;b&gt;&amp;co" in text


def metric_row(user: str) -> dict:
    return {
        "principal": user,
        "timestamp": T0 + 30_000,
        "quota": 2.0,
        "rate": 3.0,
        "tokens": 0.0,
        "events": 6,
    }


def test_no_throttles_no_throttle_plots(tmp_path):
    out = tmp_path / "out"
    write_run(out, {0: {"decisions": rows("User:bob", BOB), "metrics": [metric_row("User:bob")]}})
    assert main(["report", str(out)]) == 0
    text = (out / "report.html").read_text(encoding="utf-8")
    assert text.count("<img ") == 1 and "No user was throttled." in text
    assert "1 user, none throttled" in text and "not derivable" in text and "No dead letters." in text


def test_the_offenders_table_is_cut_at_max_rows(tmp_path):
    out = tmp_path / "out"
    users = [f"User:u{k:02d}" for k in range(MAX_ROWS + 3)]
    decisions = [r for u in users for r in rows(u, judge(1, [(0, 1), (0, 2)]))]
    write_run(out, {0: {"decisions": decisions, "metrics": [metric_row(u) for u in users]}})
    assert main(["report", str(out)]) == 0
    text = (out / "report.html").read_text(encoding="utf-8")
    assert text.count("<td>User:u") == MAX_ROWS
    assert "3 other users, 3 of them throttled (3 throttles)" in text


@pytest.mark.parametrize("make", ["missing", "empty", "empty-outputs"])
def test_a_folder_without_output_is_a_clear_error(tmp_path, capsys, make):
    folder = tmp_path / "run"
    if make != "missing":
        folder.mkdir()
    if make == "empty-outputs":  # a run that read nothing
        for name in OUTPUTS:
            (folder / name).mkdir()
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("pidquota: error: ") and f"'{folder}'" in err
    assert ("does not exist" if make == "missing" else "holds no pidquota output") in err
    assert not (folder / "report.html").exists()


def test_without_matplotlib_the_error_names_the_extra(run_dir, capsys, monkeypatch):
    for module in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, module, None)  # `import` raises ImportError
    assert main(["report", str(run_dir)]) == 2
    assert capsys.readouterr().err == (
        "pidquota: error: pidquota report needs matplotlib, which is not installed: "
        "pip install 'pidquota[report]'\n"
    )
    assert not (run_dir / "report.html").exists()


def test_fresh_deletes_an_output_folder_with_its_report(run_dir):
    from pidquota.cli.output_folder import fresh

    assert main(["report", str(run_dir)]) == 0
    assert fresh(run_dir, str(run_dir / "_checkpoint")) == [run_dir] and not run_dir.exists()


def test_the_principals_the_actuator_acted_on_get_a_section(tmp_path):
    out = tmp_path / "out"
    write_run(out, {0: {"decisions": rows("User:bob", BOB), "metrics": [metric_row("User:bob")]}})
    assert "Acted on" not in render(rd.load_run(out))  # no actuator, no section
    (out / "actions").mkdir()
    control = "quota user=crash request_percentage"
    actions = [
        {"at_ms": T0, "principal": "User:crash", "action": "apply", "control": control, "dry_run": False},
        {"at_ms": T0 + 1, "principal": "User:ANONYMOUS", "action": "skipped", "control": "request-quota"},
        {
            "at_ms": T0 + 9_000,
            "principal": "User:crash",
            "action": "undo",
            "control": control,
            "dry_run": False,
        },
        {
            "at_ms": T0 + 9_000,
            "principal": "User:loop",
            "action": "apply",
            "control": control,
            "dry_run": True,
        },
    ]
    (out / "actions" / "run-1.jsonl").write_text("".join(json.dumps(a) + "\n" for a in actions))
    table = rs.acted_on(rd.load_run(out).actions)
    assert table[["principal", "held", "failed"]].values.tolist() == [
        ["User:crash", False, 0],
        ["User:loop", True, 0],
    ]
    page = render(rd.load_run(out))
    assert "<h2>Acted on</h2>" in page and "User:ANONYMOUS" not in page
    assert (
        f"<td>User:crash</td><td>{control}</td><td>2026-01-01 00:00:00 UTC</td><td>2026-01-01 00:00:09 UTC</td>"
        in page
    )
    assert "<td>User:loop (dry run)</td>" in page and "still held" in page


def test_a_one_batch_run_gets_a_rate_line_from_its_decisions():
    """The docstring's example: W = 60 s, ADMITs at 0, 10 and 70 s, one metrics row only."""
    decisions = pd.DataFrame(
        rows("User:a", judge(100, [(0, 1), (10_000, 2), (70_000, 3)], window_ms=60_000), batch_id=0)
    )
    metrics = pd.DataFrame([{"principal": "User:a", "timestamp": T0 + 70_000, "rate": 1.0, "quota": 100.0}])
    series = rs.rate_series(metrics, ["User:a"], decisions, 60_000, (T0, T0 + 70_000))
    ends = [int(t.value // 10**6) - T0 for t in series["time"]]
    assert ends == [*range(5_000, 75_000, 5_000), 70_001]  # 5 s bins; the last ends with the run
    assert series["rate"].tolist() == [sum(e - 60_000 <= a < e for a in (0, 10_000, 70_000)) for e in ends]
    assert series["rate"].tolist()[:3] == [1, 1, 2] and series["rate"].iloc[-1] == 1
    assert set(series["quota"]) == {100.0}
    only_metrics = rs.rate_series(metrics, ["User:a"])  # no decisions: the metrics rows, one point
    assert only_metrics["rate"].tolist() == [1.0]


def test_one_application_through_several_brokers_is_one_client():
    decisions = judge(1, [(t, t) for t in range(6)])
    named = [d | {"client_id": "crash", "broker": str(i % 3)} for i, d in enumerate(decisions)]
    table = rd.offenders(pd.DataFrame(rows("User:crash", named)))
    assert table["client"].tolist() == ["client.id crash via 3 brokers"]
