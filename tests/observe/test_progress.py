"""observe/progress.py: a progress line per batch where no table shows (run --once): in place on
a terminal, a plain line per batch when piped (issue 35 §4: 35 s of silence before)."""

from __future__ import annotations

import pandas as pd

from pidquota.observe.progress import Progress


def _frames(events: dict[str, int], throttled: dict[str, int], dead: int = 0) -> dict:
    metrics = pd.DataFrame(
        {
            "principal": list(events),
            "events": list(events.values()),
            "throttled": [throttled.get(u, 0) for u in events],
        }
    )
    return {"metrics": metrics, "dead-letters": pd.DataFrame({"raw": ["x"] * dead})}


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_piped_each_batch_is_a_line_with_running_totals():
    printed, clock = [], Clock()
    progress = Progress(out=printed.append, tty=False, clock=clock)
    progress.update(0, _frames({"User:a": 300, "User:b": 100}, {"User:a": 30}))
    clock.t += 12.4
    progress.update(1, _frames({"User:a": 370, "User:c": 8}, {"User:a": 12}, dead=2))
    progress.update(2, _frames({}, {}))  # a batch without data: nothing to say
    progress.close()
    assert printed == [
        "pidquota: batch 0: 400 events read, 30 throttle decisions, 0 dead letters, 2 users (0.0 s)\n",
        "pidquota: batch 1: 780 events read, 42 throttle decisions, 2 dead letters, 3 users (12.4 s)\n",
    ]


def test_on_a_terminal_the_line_is_rewritten_in_place_and_ended_once():
    printed = []
    progress = Progress(out=printed.append, tty=True, clock=Clock())
    progress.update(0, _frames({"User:a": 5}, {}))
    progress.update(1, _frames({"User:a": 5}, {}))
    progress.close()
    assert [p[:6] for p in printed[:2]] == ["\r\x1b[Kpi"] * 2 and printed[-1] == "\n"
    assert "batch 1: 10 events read" in printed[1]


def test_a_ticker_says_at_most_one_line_per_period_the_first_at_once():
    from pidquota.observe.progress import Ticker

    printed, clock = [], Clock()
    ticker = Ticker(every_s=5, out=printed.append, tty=False, clock=clock)
    for n in range(12):  # 12 calls, 1 s apart
        ticker.tick(lambda n=n: f"pidquota: generate: {n:,} events")
        clock.t += 1
    ticker.close()
    assert printed == [
        "pidquota: generate: 0 events (0 s)\n",
        "pidquota: generate: 5 events (5 s)\n",
        "pidquota: generate: 10 events (10 s)\n",
    ]


def test_a_count_of_one_is_singular():
    from pidquota.observe.progress import counted

    assert [counted(n, "dead letter") for n in (0, 1, 2, 1204)] == [
        "0 dead letters",
        "1 dead letter",
        "2 dead letters",
        "1,204 dead letters",
    ]
