"""pidquota's own log lines on stderr, in the CLI's voice: ``pidquota: warning: <message>``.

The modules log through ``logging.getLogger("pidquota.<part>")`` (``store/sink.py``'s Redis
outage, the output files' rolling, ...). Without a handler, Python's last resort would print
the bare message; :func:`to_stderr` gives the ``pidquota`` logger one for WARNING and above
while a command runs, and for the INFO lines of the loggers in :data:`SAID` (``pidquota: <message>``,
no level): news an operator watches for, such as each broker's verdict on the plug-in state
as it changes. A message that already starts with ``pidquota: `` is not prefixed twice."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

PREFIX = "pidquota: "
SAID = ("pidquota.actuate.brokers",)  # loggers whose INFO lines are the run's own too


class _Stderr(logging.Handler):
    """``pidquota: <level>: <message>`` on the current ``sys.stderr`` (looked up per line)."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"{PREFIX}{level}{super().format(record).removeprefix(PREFIX)}"

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(self.format(record), file=sys.stderr, flush=True)
        except Exception:  # a closed stderr must not stop the run
            self.handleError(record)


@contextlib.contextmanager
def to_stderr() -> Iterator[None]:
    """While a command runs: the ``pidquota`` loggers' warnings and errors on stderr."""
    logger = logging.getLogger("pidquota")
    handler = _Stderr(logging.INFO)
    handler.addFilter(lambda r: r.levelno >= logging.WARNING or r.name in SAID)
    levels = {name: logging.getLogger(name).level for name in SAID}
    for name in SAID:
        logging.getLogger(name).setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
