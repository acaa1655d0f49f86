"""A progress line per batch for a run that shows no table (``run --once``): what was read
and decided so far, so that half a minute of work is not a silent screen.

On standard output, as the live table of a long run is. On a terminal the line is rewritten in place (``\\r``, cleared to the end); piped, each batch
is a plain line of its own. Counts are running totals over this process's batches.

Worked example: batches of 400 events with 30 throttles, then 380 with 12 and 2 dead
letters, print ``pidquota: batch 1: 780 events read, 42 throttle decisions, 2 dead
letters, 7 users (12.4 s)``, the time since the first batch began to be awaited.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping

_CLEAR_LINE = "\r\x1b[K"


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``1 user``, ``2 users``, ``1,204 dead letters``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


class Progress:
    """Feeds on the sink's ``on_batch`` (``batch_id``, the batch's frames)."""

    def __init__(
        self,
        out: Callable[[str], None] | None = None,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.out = out or self._stdout
        self.clock = clock
        self.started = clock()
        self.events = self.throttles = self.dead = 0
        self.users: set[str] = set()
        self.shown = False

    def _stdout(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def update(self, batch_id: int, frames: Mapping) -> None:
        import pandas as pd

        metrics, dead = frames["metrics"], frames["dead-letters"]
        if not len(metrics) and not len(dead):
            return  # a batch Spark runs without data, to move the watermark on
        if len(metrics):
            self.events += int(pd.to_numeric(metrics.get("events"), errors="coerce").fillna(0).sum())
            self.throttles += int(pd.to_numeric(metrics.get("throttled"), errors="coerce").fillna(0).sum())
            self.users.update(str(p) for p in metrics["principal"])
        self.dead += len(dead)
        line = (
            f"pidquota: batch {batch_id}: {counted(self.events + self.dead, 'event')} read, "
            f"{counted(self.throttles, 'throttle decision')}, {counted(self.dead, 'dead letter')}, "
            f"{counted(len(self.users), 'user')} ({self.clock() - self.started:.1f} s)"
        )
        self.out(_CLEAR_LINE + line if self.tty else line + "\n")
        self.shown = True

    def close(self) -> None:
        """On a terminal, end the line being rewritten, so the next output starts on its own."""
        if self.tty and self.shown:
            self.out("\n")


class Ticker:
    """At most one progress line every ``every_s`` seconds on stderr, for a command's long loop
    (``generate``, ``clients``): rewritten in place on a terminal, a line each when piped, and
    :meth:`close` ends it. The command's own result line follows.

    Worked example: a loop that calls ``tick(lambda: f"{n:,} events")`` 600 times in 33 s,
    every 5 s, prints 6 lines (piped), the first at the first call."""

    def __init__(
        self,
        every_s: float = 5.0,
        out: Callable[[str], None] | None = None,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.every_s, self.clock = every_s, clock
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.out = out or _stderr
        self.started = clock()
        self._last: float | None = None

    def tick(self, text: Callable[[], str]) -> None:
        now = self.clock()
        if self._last is not None and now - self._last < self.every_s:
            return
        self._last = now
        line = f"{text()} ({now - self.started:.0f} s)"
        self.out(_CLEAR_LINE + line if self.tty else line + "\n")

    def close(self) -> None:
        if self.tty and self._last is not None:
            self.out(_CLEAR_LINE)


def _stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()
