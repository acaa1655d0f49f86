"""pidquota's own log lines on stderr, in the CLI's voice: ``pidquota: warning: <message>``.

The modules log through ``logging.getLogger("pidquota.<part>")`` (``store/sink.py``'s Redis
outage, the output files' rolling, ...). Without a handler, Python's last resort would print
the bare message; :func:`to_stderr` gives the ``pidquota`` logger one for WARNING and above
while a command runs. A message that already starts with ``pidquota: `` is not prefixed twice."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

PREFIX = "pidquota: "


class _Stderr(logging.Handler):
    """``pidquota: <level>: <message>`` on the current ``sys.stderr`` (looked up per line)."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{PREFIX}{record.levelname.lower()}: {super().format(record).removeprefix(PREFIX)}"

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(self.format(record), file=sys.stderr, flush=True)
        except Exception:  # a closed stderr must not stop the run
            self.handleError(record)


@contextlib.contextmanager
def to_stderr() -> Iterator[None]:
    """While a command runs: the ``pidquota`` loggers' warnings and errors on stderr."""
    logger = logging.getLogger("pidquota")
    handler = _Stderr(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
