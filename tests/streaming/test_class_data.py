"""streaming/class_data.py: the class-data archive of the Spark JVM pidquota starts.

The quick tests pin the archive's life (written to a temporary name, promoted once whole,
one per Java and Spark); the e2e test proves a real Spark JVM writes one as it exits and
maps it at the next start (``/proc/PID/maps``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pidquota.streaming import class_data
from pidquota.streaming.session import find_java


@pytest.fixture
def jars(tmp_path) -> Path:
    folder = tmp_path / "jars"
    folder.mkdir()
    for name in ("spark-core.jar", "spark-sql.jar"):
        (folder / name).write_bytes(b"")
    return folder


def _options(folder, jars, now=None) -> str:
    return class_data.java_options(str(folder), find_java(), jars, now)


def test_off_when_the_setting_is_empty(jars):
    assert class_data.java_options("", find_java(), jars) == ""


def test_without_an_archive_the_jvm_writes_one_under_a_temporary_name(tmp_path, jars):
    folder = tmp_path / "cache" / "jvm"
    options = _options(folder, jars)
    assert folder.is_dir()
    [flag, quiet] = options.split()
    assert flag.startswith(f"-XX:ArchiveClassesAtExit={folder}/spark-")
    assert f".{os.getpid()}-" in flag and flag.endswith(".tmp")
    assert quiet == class_data.QUIET


def test_a_whole_temporary_archive_is_promoted_and_mapped(tmp_path, jars):
    tmp = Path(_options(tmp_path, jars).split()[0].split("=", 1)[1])
    tmp.write_bytes(b"archive")
    now = time.time()
    assert _options(tmp_path, jars, now).startswith("-XX:ArchiveClassesAtExit=")  # still being written
    assert tmp.exists()
    options = _options(tmp_path, jars, now + class_data.WHOLE_AFTER_S)
    archive = Path(options.split()[0].removeprefix("-XX:SharedArchiveFile="))
    assert archive.read_bytes() == b"archive" and archive.suffix == ".jsa"
    assert not tmp.exists()


def test_of_several_whole_temporaries_the_newest_is_kept_and_the_rest_dropped(tmp_path, jars):
    first = _options(tmp_path, jars).split()[0].split("=", 1)[1]
    older, newer = Path(first.replace(".tmp", "-1.tmp")), Path(first.replace(".tmp", "-2.tmp"))
    older.write_bytes(b"old")
    newer.write_bytes(b"new")
    os.utime(older, (time.time() - 600, time.time() - 600))
    options = _options(tmp_path, jars, time.time() + class_data.WHOLE_AFTER_S)
    assert Path(options.split()[0].removeprefix("-XX:SharedArchiveFile=")).read_bytes() == b"new"
    assert list(tmp_path.glob("*.tmp")) == []


def test_another_spark_or_java_gets_its_own_archive(tmp_path, jars):
    before = _options(tmp_path, jars).split()[0]
    (jars / "spark-core.jar").rename(jars / "spark-core-4.4.jar")
    assert _options(tmp_path, jars).split()[0] != before


def test_a_folder_that_cannot_be_written_costs_the_speed_not_the_run(tmp_path, jars):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert _options(blocker / "jvm", jars) == ""


def test_a_folder_with_a_space_is_not_used(tmp_path, jars):
    assert _options(tmp_path / "my cache", jars) == ""


_START = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from pidquota.conf.loader import load
    from pidquota.streaming.session import spark_session
    spark = spark_session(load(overrides={"pidquota.spark.class.cache": sys.argv[1]}))
    pid = spark.sparkContext._gateway.proc.pid
    maps = Path(f"/proc/{pid}/maps").read_text()
    print(pid, any(line.endswith(".jsa") for line in maps.splitlines() if sys.argv[1] in line))
    """
)


@pytest.mark.e2e
def test_a_spark_jvm_writes_the_archive_as_it_exits_and_the_next_one_maps_it(tmp_path):
    folder = tmp_path / "jvm"

    def start() -> tuple[int, bool]:
        done = subprocess.run(
            [sys.executable, "-c", _START, str(folder)], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "cds" not in done.stdout + done.stderr  # Java's archive messages are silenced
        pid, mapped = done.stdout.split()[-2:]
        return int(pid), mapped == "True"

    pid, mapped = start()
    assert not mapped
    deadline = time.monotonic() + 120
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:  # the JVM writes it as it exits
        time.sleep(0.5)
    [tmp] = folder.glob("*.tmp")
    assert tmp.stat().st_size > 10_000_000
    old = time.time() - class_data.WHOLE_AFTER_S
    os.utime(tmp, (old, old))
    _, mapped = start()
    assert mapped
    assert [p.suffix for p in folder.iterdir()] == [".jsa"]
