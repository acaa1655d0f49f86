"""The live table: its STATE column answers what ``pidquota status`` answers, it never shows a
throttled user's tokens as 1, it fits long principals, and it redraws on a terminal and prints
every batch when piped."""

import pandas as pd

from pidquota.observe.table import LEGEND, UserTable, tokens_text
from pidquota.quota.user_state import UserState

W = 3_600_000


def row(principal, tokens, rate=5.0, quota=100.0, throttled=0, ts=10_000):
    return {
        "principal": principal,
        "timestamp": ts,
        "quota": quota,
        "tokens": tokens,
        "rate": rate,
        "throttle_time_ms": 0,
        "admitted_total": 5,
        "throttled_total": throttled,
        "state_bytes": 300,
    }


def shown(rows, batch_id=3, **kw):
    printed = []
    table = UserTable(W, every_s=0, out=printed.append, tty=False, **kw)
    table.update(batch_id, {"metrics": pd.DataFrame(rows).assign(batch_id=batch_id)})
    return printed[-1].strip()


def lines_of(text):
    """A table's rows by user: its lines after the title and the header, but the legend."""
    return {line.split()[0]: line for line in text.splitlines()[2:] if line != LEGEND}


def test_state_column_agrees_with_status():
    rows = [row("User:crash", 0.5, rate=99.0, throttled=7), row("User:steady", 95.0)]
    rows.append({"principal": "User:free", "timestamp": 10_000, "quota": None, "tokens": None})
    lines = lines_of(shown(rows))
    assert lines["User:crash"].rstrip().endswith("THROTTLED 18s")  # half a token short at 100/h
    assert lines["User:steady"].rstrip().endswith("ok") and lines["User:free"].rstrip().endswith("ok")
    status = UserState.from_metrics(rows[0], 3, W)
    assert status.throttled and status.wait_ms == 18_000


def test_throttled_users_come_first_with_their_tokens_rounded_down():
    text = shown([row("User:a-steady", 95.0), row("User:z-crash", 0.996, throttled=3)])
    body = text.splitlines()[2:-1]
    assert body[0].startswith("User:z-crash") and " 0.99 " in body[0]
    assert tokens_text(0.996) == "0.99" and tokens_text(1.0) == "1.00" and tokens_text(None) == "-"


def test_a_long_principal_is_shown_whole_up_to_60_characters():
    long = "User:CN=producer-service-for-payments.example.com,OU=kafka"  # 58 characters
    longer = "User:" + "x" * 80
    lines = shown([row(long, 5.0), row(longer, 5.0)]).splitlines()
    assert any(line.startswith(long + " ") for line in lines)
    assert any(line.startswith("User:" + "x" * 54 + "\u2026 ") for line in lines)


def test_the_legend_explains_rate_above_quota():
    text = shown([row("User:a", 0.2, rate=118.0, quota=60.0)])
    assert text.splitlines()[-1] == LEGEND
    assert "2 x quota/W" in LEGEND and "tokens < 1" in LEGEND


def test_on_a_terminal_the_table_is_redrawn_in_place():
    printed = []
    table = UserTable(W, every_s=0, out=printed.append, tty=True)
    for batch in (1, 2):
        table.update(batch, {"metrics": pd.DataFrame([row("User:a", 5.0)]).assign(batch_id=batch)})
    assert len(printed) == 2 and all(p.startswith("\x1b[H\x1b[2J") for p in printed)


def test_piped_every_batch_is_shown_or_named():
    printed, now = [], [0.0]
    table = UserTable(W, every_s=3.0, out=printed.append, tty=False, clock=lambda: now[0])
    for batch in range(1, 6):
        now[0] = batch * 1.0  # a batch a second, a table at most every 3 s
        table.update(batch, {"metrics": pd.DataFrame([row("User:a", 5.0)]).assign(batch_id=batch)})
    headers = [p.strip().splitlines()[0] for p in printed]
    assert headers[0].startswith("-- batch 1,") and headers[1].startswith("-- batches 2-4,")
    assert not printed[0].startswith("\x1b") and len(printed) == 2  # batch 5 waits for the next table
    table.flush()  # the run ends: the last batch is shown, once
    table.flush()
    assert [p.strip().splitlines()[0][:11] for p in printed[2:]] == ["-- batch 5,"]


def test_shadow_says_so():
    assert "SHADOW" in shown([row("User:a", 5.0)], shadow=True).splitlines()[0]


def test_a_long_table_is_cut_after_the_throttled_users():
    rows = [row(f"User:u{i:03d}", 5.0) for i in range(30)] + [row("User:zz", 0.1, throttled=1)]
    text = shown(rows, max_rows=5).splitlines()
    assert text[2].startswith("User:zz") and len(text) == 2 + 5 + 2
    assert text[-2] == "... and 26 more users (0 of them throttled)"


def test_a_user_the_actuator_acts_on_says_so_until_it_is_undone():
    printed = []
    table = UserTable(W, every_s=0, out=printed.append, tty=False)
    rows = pd.DataFrame([row("User:crash", 0.5, throttled=7), row("User:steady", 95.0)]).assign(batch_id=1)
    applied = pd.DataFrame([{"principal": "User:crash", "action": "apply", "dry_run": False}])
    table.update(1, {"metrics": rows, "actions": applied})
    lines = lines_of(printed[-1].strip())
    assert lines["User:crash"].rstrip().endswith("THROTTLED 18s, ACTED ON")
    assert lines["User:steady"].rstrip().endswith("ok")
    undone = pd.DataFrame([{"principal": "User:crash", "action": "undo", "dry_run": False}])
    table.update(2, {"metrics": rows.assign(batch_id=2), "actions": undone})
    assert lines_of(printed[-1].strip())["User:crash"].rstrip().endswith("THROTTLED 18s")
    dry = pd.DataFrame([{"principal": "User:steady", "action": "apply", "dry_run": True}])
    table.update(3, {"metrics": rows.assign(batch_id=3), "actions": dry})
    assert lines_of(printed[-1].strip())["User:steady"].rstrip().endswith("ok, WOULD ACT")


def test_the_counts_say_what_they_count():
    text = shown([row("User:crash", 0.5, throttled=7)])
    header = text.splitlines()[1].split()
    assert "throttles" in header and "throttled" not in header
    assert "throttles: THROTTLE decisions (a refused PID seen again counts again)" in text


def test_each_user_is_shown_with_its_main_client_and_keeps_it():
    printed = []
    table = UserTable(W, every_s=0, out=printed.append, tty=False)
    crash = row("User:crash", 0.5, throttled=7) | {"client_id": "crash-app", "client_address": "10.0.0.5"}
    table.update(1, {"metrics": pd.DataFrame([crash, row("User:steady", 95.0)]).assign(batch_id=1)})
    lines = lines_of(printed[-1].strip())
    assert lines["User:crash"].endswith("THROTTLED 18s  client.id crash-app at 10.0.0.5")
    assert lines["User:steady"].rstrip().endswith("ok")
    table.update(2, {"metrics": pd.DataFrame([row("User:crash", 0.5, throttled=8)]).assign(batch_id=2)})
    assert lines_of(printed[-1].strip())["User:crash"].endswith("client.id crash-app at 10.0.0.5")


def test_a_user_held_from_before_a_restart_shows_acted_on():
    """Issue 42 §3: a restarted run keeps what it holds (its start's rows are 'keep', not
    'apply'), and its table said nothing of it."""
    printed = []
    table = UserTable(W, every_s=0, out=printed.append, tty=False)
    table.held({"User:crash": 1_900_000_000_000})
    table.update(1, {"metrics": pd.DataFrame([row("User:crash", 0.5, throttled=7)]).assign(batch_id=1)})
    assert lines_of(printed[-1].strip())["User:crash"].rstrip().endswith("THROTTLED 18s, ACTED ON")


def test_piped_the_legend_comes_with_the_first_table_and_every_20th_and_on_a_terminal_with_each():
    from pidquota.observe.table import LEGEND_EVERY

    for tty, expected in ((False, [0, LEGEND_EVERY]), (True, list(range(LEGEND_EVERY + 5)))):
        printed = []
        table = UserTable(W, every_s=0, out=printed.append, tty=tty)
        for b in range(LEGEND_EVERY + 5):
            table.update(b, {"metrics": pd.DataFrame([row("User:a", 5.0)]).assign(batch_id=b)})
        assert len(printed) == LEGEND_EVERY + 5
        assert [i for i, text in enumerate(printed) if text.rstrip().endswith(LEGEND)] == expected
        assert all("User:a" in text for text in printed)
