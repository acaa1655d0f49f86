"""The compiled judge's cache when pidquota runs from a zip (``quota/zip_cache.py``): one
folder per zip's content, shared by every copy, where numba alone keyed it by the copy's path
(each executor of each application compiled the kernel, 16-41 CPU-s, and left ~2 MB behind)."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

from harness.zip_kernel import load

from pidquota.quota import kernel, zip_cache
from pidquota.streaming.ship import write_zip


def test_the_zip_a_module_is_read_from(tmp_path):
    z = tmp_path / "a" / "pidquota.zip"
    z.parent.mkdir()
    z.write_bytes(b"PK")
    assert zip_cache.zip_of(f"{z}/pidquota/quota/kernel.py") == str(z)
    assert zip_cache.zip_of(kernel.__file__) is None  # this checkout: files on disk
    assert zip_cache.zip_of(str(tmp_path / "b.zip" / "kernel.py")) is None  # no such zip


def test_copies_of_the_same_bytes_share_a_folder_and_other_bytes_do_not(tmp_path):
    a = write_zip(tmp_path / "a" / "pidquota.zip")
    b = tmp_path / "b" / "pidquota.zip"
    b.parent.mkdir()
    shutil.copy(a, b)  # another copy, another time: Spark's copy for another executor
    assert (
        write_zip(tmp_path / "c" / "pidquota.zip").read_bytes() == a.read_bytes()
    )  # the same code, the same bytes
    assert zip_cache.folder_name(str(a)) == zip_cache.folder_name(str(b))
    assert zip_cache.folder_name(str(a)).startswith("pidquota_zip_")
    with zipfile.ZipFile(b, "a") as zf:  # other code: another folder
        zf.writestr("pidquota/extra.py", "X = 1\n")
    assert zip_cache.folder_name(str(a)) != zip_cache.folder_name(str(b))


def test_a_file_on_disk_keeps_numbas_own_cache():
    assert kernel.available()
    assert not zip_cache.by_content(kernel._group)
    assert Path(kernel._group.stats.cache_path) == Path(kernel.__file__).parent / "__pycache__"


def test_a_second_copy_of_the_zip_loads_the_kernel_the_first_compiled_or_loaded(tmp_path):
    """Two executors' copies, in two folders: the second compiles nothing (tests/run.sh
    compiled it from a zip of this code already; alone, the first copy compiles it)."""
    a = write_zip(tmp_path / "app-1" / "pidquota.zip")
    b = tmp_path / "app-2" / "pidquota.zip"
    b.parent.mkdir()
    shutil.copy(a, b)
    first, second = load(a), load(b)
    assert Path(first["cache_path"]).name == zip_cache.folder_name(str(a))
    assert second["cache_path"] == first["cache_path"]
    assert second["hits"] >= 1 and second["misses"] == 0, second


TINY = "def twice(x):\n    return 2 * x\n"
PROBE = """
import json, sys
sys.path.insert(0, {zip!r})
from numba import njit
from numba.core.caching import NullCache
import tiny
from pidquota.quota import zip_cache
d = njit(cache=True)(tiny.twice)
kept = zip_cache.by_content(d)
print(json.dumps({{"kept": kept, "null": isinstance(d._cache, NullCache), "value": d(21)}}))
"""


def test_a_cache_folder_that_cannot_be_made_compiles_without_a_cache(tmp_path):
    """A home whose cache folder cannot be made (here: NUMBA_CACHE_DIR under a file; on an
    executor, a read-only home): the function is compiled and runs, uncached, where numba's
    own zip cache failed the compile when it saved."""
    import json
    import os
    import subprocess
    import sys

    z = tmp_path / "tiny.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("tiny.py", TINY)
    (tmp_path / "a-file").write_text("")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "a-file" / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(zip=str(z))], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"kept": False, "null": True, "value": 42}
