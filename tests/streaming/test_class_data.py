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
from pidquota.streaming.session import _spark_home, find_java


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


def test_without_an_archive_the_jvm_writes_one_under_a_temporary_name_with_its_class_path(tmp_path, jars):
    folder = tmp_path / "cache" / "jvm"
    options = _options(folder, jars)
    assert folder.is_dir()
    [flag, quiet] = options.split()
    assert flag.startswith(f"-XX:ArchiveClassesAtExit={folder}/spark-")
    assert f".{os.getpid()}-" in flag and flag.endswith(".tmp")
    assert quiet == class_data.QUIET
    assert Path(flag.split("=", 1)[1]).with_suffix(".cp").read_text() == f"{jars}/*"


def _written(tmp_path, jars, data: bytes = b"archive") -> Path:
    """What a JVM leaves as it exits: its temporary archive (``data``) beside its class path."""
    tmp = Path(_options(tmp_path, jars).split()[0].split("=", 1)[1])
    tmp.write_bytes(data)
    return tmp


def test_while_one_jvm_writes_the_archive_no_other_writes_one(tmp_path, jars):
    tmp = _written(tmp_path, jars)
    assert _options(tmp_path, jars, time.time()) == ""  # no archive yet, and no second writer
    assert tmp.exists()


def test_jvms_started_together_write_one_archive_not_one_each(tmp_path, jars):
    first = _options(tmp_path, jars)  # a broker of a 3-broker test cluster
    assert first.startswith("-XX:ArchiveClassesAtExit=")
    assert _options(tmp_path, jars) == ""  # the next broker, a moment later
    later = time.time() + class_data.STARTED_WITHIN_S + 1
    assert _options(tmp_path, jars, later).startswith("-XX:ArchiveClassesAtExit=")  # the first never wrote


def test_an_upgrades_old_archives_go_the_newest_stay(tmp_path, jars):
    for i in range(5):
        old = tmp_path / f"spark-{i:016x}.jsa"
        old.write_bytes(b"x")
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    (tmp_path / "kafka-0000000000000000.jsa").write_bytes(b"x")  # another program's: not this one's to prune
    _options(tmp_path, jars)
    left = sorted(p.name for p in tmp_path.glob("*.jsa"))
    assert left == ["kafka-0000000000000000.jsa", f"spark-{3:016x}.jsa", f"spark-{4:016x}.jsa"]


def test_another_keys_temporary_archives_go_after_a_day_this_keys_stay(tmp_path, jars):
    """A deleted venv's JVM wrote a temporary archive that no start of its own key will check."""
    stale = [tmp_path / f"spark-{'a' * 16}.1-00000000{s}" for s in (".tmp", ".cp")]
    gone = _gone_pid()
    fresh = [tmp_path / f"spark-{'b' * 16}.{gone}-33333333{s}" for s in (".tmp", ".cp")]
    day = time.time() - class_data.STALE_S
    for path, age in [(p, day - 60) for p in stale] + [(p, day + 60) for p in fresh]:
        path.write_bytes(b"x")
        os.utime(path, (age, age))
    other = tmp_path / f"kafka-{'c' * 16}.3-00000000.tmp"  # another program's: not this one's
    other.write_bytes(b"x")
    os.utime(other, (day - 60, day - 60))
    ours = _written(tmp_path, jars)  # this key's own, being written: kept
    week = time.time() - class_data.ORPHAN_S
    alone = [  # no archive beside: its process gone for a week, or for a day, or running for a week
        tmp_path / f"spark-{'d' * 16}.{pid}-{rand}.cp"
        for pid, rand in ((gone, "00000000"), (gone, "11111111"), (os.getpid(), "22222222"))
    ]
    for path, age in zip(alone, (week - 60, week + 60, week - 60), strict=True):
        path.write_text("cp")
        os.utime(path, (age, age))
    beside = fresh[0].with_suffix(".cp")  # a week-old class path whose JVM wrote an hour ago: kept
    os.utime(beside, (week - 60, week - 60))
    _options(tmp_path, jars, time.time())
    assert [p.exists() for p in (*stale, *alone)] == [False, False, False, True, True]
    assert all(p.exists() for p in (*fresh, other, ours))


def _gone_pid() -> int:
    """A PID no process has now."""
    pid = 4_000_000
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


def test_an_archive_that_java_cannot_map_is_deleted_not_used(tmp_path, jars):
    tmp = _written(tmp_path, jars, b"truncated: java would crash on it")
    options = _options(tmp_path, jars, time.time() + class_data.WHOLE_AFTER_S)
    assert options.startswith("-XX:ArchiveClassesAtExit=")  # written anew by this JVM
    assert not tmp.exists() and not tmp.with_suffix(".cp").exists()
    assert list(tmp_path.glob("*.jsa")) == []


def test_an_archive_java_maps_is_promoted_and_used(tmp_path, jars, monkeypatch):
    tmp = _written(tmp_path, jars)
    checked = []
    monkeypatch.setattr(class_data, "_maps", lambda java, path, cp: checked.append((path, cp)) or True)
    options = _options(tmp_path, jars, time.time() + class_data.WHOLE_AFTER_S)
    assert checked == [(tmp, f"{jars}/*")]
    archive = Path(options.split()[0].removeprefix("-XX:SharedArchiveFile="))
    assert archive.read_bytes() == b"archive" and archive.suffix == ".jsa"
    assert list(tmp_path.glob("*.tmp")) == list(tmp_path.glob("*.cp")) == []


def test_another_spark_or_java_gets_its_own_archive(tmp_path, jars):
    before = _options(tmp_path, jars).split()[0]
    (jars / "spark-core.jar").rename(jars / "spark-core-4.4.jar")
    assert _options(tmp_path, jars).split()[0] != before


def test_a_venv_made_again_at_the_same_path_gets_a_new_archive(tmp_path, jars):
    """Java refuses an archive whose jars changed size or time ("A jar file is not the one used
    while building the shared archive file"), so the same names are not the same jars."""
    key = class_data._key(find_java(), jars)
    os.utime(jars / "spark-sql.jar", (1_000_000, 1_000_000))  # the same jar, installed anew
    assert class_data._key(find_java(), jars) != key
    (jars / "spark-sql.jar").write_bytes(b"longer")
    assert len({key, class_data._key(find_java(), jars)}) == 2


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


def _wait_gone(pid: int) -> None:
    """Until the JVM ``pid`` has exited: it writes its archive as it exits."""
    deadline = time.monotonic() + 120
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.5)


@pytest.mark.e2e
def test_a_spark_jvm_writes_the_archive_as_it_exits_and_the_next_one_maps_it_once_checked(tmp_path):
    """A whole archive is used; a truncated one (a JVM killed while writing it) would crash
    Java, and a corrupt one fails its checksums: both are refused at the check."""
    folder = tmp_path / "jvm"
    old = time.time() - class_data.WHOLE_AFTER_S

    def start() -> tuple[int, bool]:
        done = subprocess.run(
            [sys.executable, "-c", _START, str(folder)], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "cds" not in done.stdout + done.stderr  # Java's archive messages are silenced
        pid, mapped = done.stdout.split()[-2:]
        return int(pid), mapped == "True"

    def written() -> Path:
        [tmp] = folder.glob("*.tmp")
        assert tmp.stat().st_size > 10_000_000 and tmp.with_suffix(".cp").is_file()
        return tmp

    pid, mapped = start()
    assert not mapped
    _wait_gone(pid)
    tmp = written()
    class_path, size = tmp.with_suffix(".cp").read_text(), tmp.stat().st_size
    # beside it, what a JVM killed while writing leaves: half an archive (Java would crash on it)
    short = tmp.with_name(tmp.name.replace(tmp.name.split(".")[1], "999-killed"))
    short.write_bytes(tmp.read_bytes()[: tmp.stat().st_size // 2])
    short.with_suffix(".cp").write_text(class_path)
    for each in (tmp, short):
        os.utime(each, (old, old))
    class_data.prepare(str(folder), find_java(), _spark_home() / "jars")  # the next start's check
    assert not list(Path.cwd().glob("hs_err_pid*.log"))  # the refused check's crash leaves no report
    [archive] = folder.iterdir()
    assert archive.suffix == ".jsa" and archive.stat().st_size == size  # the whole one, checked
    _, mapped = start()
    assert mapped
    # a corrupt archive, not a short one (a disk's bad block): its checksums refuse it at the check
    data = bytearray(archive.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16384] = bytes(16384)
    corrupt = tmp_path / "corrupt.jsa"
    corrupt.write_bytes(bytes(data))
    assert class_data._maps(find_java(), archive, class_path)
    assert not class_data._maps(find_java(), corrupt, class_path)
