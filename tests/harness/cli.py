"""``python -m pidquota`` in a subprocess, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness import require

# Commands that never start Spark: a test may run them in the quick tier.
WITHOUT_SPARK = frozenset(
    {"package", "generate", "blocks", "configs", "status", "actuator", "report", "--help", "--version"}
)


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 600):
    """``python -m pidquota ARGS`` in a subprocess, output captured. A command that can start
    Spark (``run``, ``recommend``) needs the test's ``e2e`` marker, even if it is meant to stop
    before Spark: a JVM of its own is what a mistake would cost."""
    if not args or args[0] not in WITHOUT_SPARK:
        require("e2e", f"`pidquota {args[0] if args else ''}` in a subprocess (a JVM of its own)")
    return subprocess.run(
        [sys.executable, "-m", "pidquota", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
