"""One line when the stream falls behind its trigger interval, instead of Spark's warning per batch."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Pace:
    """Watches Spark's progress reports; says so when ``after`` batches in a row took
    longer than the trigger interval, at most once every ``every_s`` seconds.

    The first batch this process runs is not counted: it pays for a cold JVM and
    Python workers.
    Example, trigger 2000 ms, ``after=3``: batches of 9.7 s (the first), 2.8 s,
    2.1 s and 2.5 s give one line after the fourth: "the last 3 batches took
    2.1-2.8 s, longer than the 2 s trigger interval".
    """

    def __init__(
        self,
        trigger_ms: int,
        out: Callable[[str], None] = _stderr,
        clock: Callable[[], float] = time.monotonic,
        after: int = 3,
        every_s: float = 300.0,
    ):
        self.trigger_ms = trigger_ms
        self.out, self.clock = out, clock
        self.after, self.every_s = after, every_s
        self._seen: int | None = None  # the last batch id looked at
        self._slow: list[float] = []  # durations (s) of the current run of slow batches
        self._said: float | None = None

    def observe(self, progress: dict | None) -> None:
        """``query.lastProgress`` (called about once a second; each batch counts once)."""
        if not progress or not self.trigger_ms or progress.get("batchId") == self._seen:
            return
        first = self._seen is None  # also on a resumed run: a cold start either way
        self._seen = progress.get("batchId")
        took = (progress.get("durationMs") or {}).get("triggerExecution")
        if first or took is None:
            return
        if took <= self.trigger_ms:
            self._slow.clear()
            return
        self._slow.append(took / 1000)
        if len(self._slow) >= self.after and self._quiet_long_enough():
            self._said = self.clock()
            lo, hi = min(self._slow[-self.after :]), max(self._slow[-self.after :])
            self.out(
                f"pidquota: the last {self.after} batches took {lo:.1f}-{hi:.1f} s, longer than the "
                f"{self.trigger_ms / 1000:g} s trigger interval: the stream is falling behind. Raise "
                "pidquota.trigger.interval.ms, or give Spark more cores"
            )

    def _quiet_long_enough(self) -> bool:
        return self._said is None or self.clock() - self._said >= self.every_s
