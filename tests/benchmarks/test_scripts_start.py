"""Every benchmark script starts as docs/benchmarks.md runs it (``python benchmarks/X.py``):
its imports resolve (``benchmarks.*`` from the repository root) and its --help answers."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if "argparse" in p.read_text())


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_script_starts_from_any_folder(script, tmp_path):
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
