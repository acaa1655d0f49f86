"""A graceful stop for pidquota's streaming sources.

Spark's ``StreamingQuery.stop()`` interrupts the micro-batch in flight, and
batches run back to back whenever they take longer than the trigger. So on
Ctrl-C the CLI touches a flag file first (a plain file operation, safe in a
signal handler). Every pidquota source, whose offsets are planned in a
separate Python process, then offers no new data: Spark finishes the batch in
flight and goes idle, or ends a ``--once`` run, and only then is the query
stopped.
"""

from __future__ import annotations

import os

OPTION = "stopFlag"  # the data source option holding the flag file's path


def requested(options) -> bool:
    """True once the flag file named in the source's options exists."""
    path = options.get(OPTION) or options.get(OPTION.lower())
    return bool(path) and os.path.exists(path)
