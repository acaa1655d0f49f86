"""The compiled judge loaded from a copy of pidquota's zip, as an executor loads it: in a
Python that cannot import this checkout (``no_project_python.py``), with the zip first on
its path. ``tests/run.sh`` runs this file once, before the workers start, so that the
cluster tests' executors load the kernel (one cache folder per zip's content,
``quota/zip_cache.py``) instead of each compiling it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CODE = """
import json, sys
sys.path.insert(0, {zip!r})
from pidquota.quota import kernel
assert kernel.__file__.startswith({zip!r}), kernel.__file__
assert kernel.available()
stats = kernel._group.stats
print(json.dumps({{"cache_path": stats.cache_path, "hits": sum(stats.cache_hits.values()),
                  "misses": sum(stats.cache_misses.values())}}))
"""


def load(zip_path: Path, env: dict | None = None) -> dict:
    """Import the kernel from ``zip_path`` in a fresh Python, compile or load it: its
    group kernel's cache folder, and how many of its signatures were loaded (hits) or
    compiled (misses)."""
    args = [sys.executable, str(HERE / "no_project_python.py"), "-c", CODE.format(zip=str(zip_path))]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    from pidquota.streaming.ship import write_zip

    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(load(write_zip(Path(folder) / "pidquota.zip"))))
