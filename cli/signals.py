"""How ``pidquota run`` stops: Ctrl-C or SIGTERM finish the batch in flight, a second one stops
at once; the wait loop that watches the query, its progress and the clock."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# `pidquota run` stopped by a signal exits as a shell reports it: 128 + the signal.
EXIT_SIGINT, EXIT_SIGTERM = 130, 143


_STOPS = {signal.SIGINT: (EXIT_SIGINT, "Ctrl-C"), signal.SIGTERM: (EXIT_SIGTERM, "SIGTERM")}
# A second signal this soon after the first is the same stop: GNU timeout and some service
# managers signal the process and its process group, so one stop arrives twice.
SAME_STOP_S = 1.0


class Signals:
    """Ctrl-C (SIGINT) or SIGTERM: finish the batch in flight, then stop.

    Installed before Spark starts and again once it has (PySpark's own SIGINT
    handler calls into the JVM from inside the signal handler while the main
    thread is in a call to it, and prints about 50 lines of py4j tracebacks).
    This one only records the signal and touches the sources' stop flag
    (``sources/stopping.py``); the wait loop sees it within a second. A
    second signal exits at once (the checkpoint is safe at any point), saying
    what it leaves held (:attr:`left_behind`); one within ``SAME_STOP_S`` of the
    first is the same stop, sent to the whole process group.
    """

    def __init__(self, clock=time.monotonic) -> None:
        self.signum: int | None = None
        self.flag = Path(tempfile.mkdtemp(prefix="pidquota-")) / "stop"
        self._previous: dict = {}
        self._clock, self._at = clock, 0.0
        # what a stop at once leaves behind, said before it exits (the actuator's held controls)
        self.left_behind: Callable[[], str] = lambda: ""
        self.on_stop: Callable[[], None] = lambda: None  # told at the first signal

    def install(self) -> Signals:
        for sig in _STOPS:
            previous = signal.signal(sig, self._handle)
            self._previous.setdefault(sig, previous)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(self.flag.parent, ignore_errors=True)

    def request_stop(self) -> None:
        self.flag.touch()

    def _handle(self, signum, frame) -> None:
        code, name = _STOPS[signum]
        if self.signum is not None:
            if self._clock() - self._at < SAME_STOP_S:
                return  # the same stop, sent to the process group too
            left = self.left_behind()
            print(
                "pidquota: stopped now; the next run resumes from the checkpoint"
                + (f". {left}" if left else ""),
                file=sys.stderr,
                flush=True,
            )
            os._exit(code)
        self.signum, self._at = signum, self._clock()
        self.on_stop()
        self.request_stop()
        print(
            f"pidquota: stopping after the batch in flight ({name}; again to stop now)",
            file=sys.stderr,
            flush=True,
        )

    @property
    def exit_code(self) -> int | None:
        return None if self.signum is None else _STOPS[self.signum][0]


def wait(
    query, duration: float | None, signals: Signals, on_progress: list | None = None
) -> BaseException | None:
    """Wait for the end, ``duration`` or a signal, showing ``on_progress`` Spark's progress
    reports; stop the query; return its error.

    ``duration`` counts from Spark's first progress report (the first micro-batch's end, or
    its first trigger with nothing to read): on a cluster, start-up (executors, their Python
    workers, the state store) can take longer than a short duration, and a clock started
    with the query would stop it before any event was decided."""
    from pyspark.errors import StreamingQueryException

    deadline = None
    try:
        while query.isActive and signals.signum is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            query.awaitTermination(max(0.01, min(left, 1.0)) if left is not None else 1.0)
            progress = query.lastProgress
            if duration is not None and deadline is None and progress is not None:
                deadline = time.monotonic() + duration
            for observe in on_progress or ():
                observe(progress)
    except StreamingQueryException as exc:
        return exc
    finally:
        _stop_between_batches(query, signals)
    return query.exception()


def _stop_between_batches(query, signals: Signals, patience_s: float = 60.0) -> None:
    """Ask the sources for no more data, let the batch in flight finish (at most ``patience_s``),
    then stop the query while no batch runs."""
    signals.request_stop()
    deadline = time.monotonic() + patience_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    if query.isActive:
        query.stop()
