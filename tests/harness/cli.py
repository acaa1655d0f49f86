"""``python -m pidquota`` in a subprocess, as a user runs it."""

from __future__ import annotations

import os
from pathlib import Path

from harness import require


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None):
    """``python -m pidquota ARGS`` in a subprocess (its own JVM), output captured."""
    require("e2e", "pidquota in a subprocess")
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "pidquota", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
