"""Spark's JVM starts sooner from a class-data archive (Java's AppCDS).

A driver JVM loads, parses and verifies about 21,000 classes from Spark's ~250 jars at
every start. Java 13+ can write the classes a JVM loaded to an archive when it exits
(``-XX:ArchiveClassesAtExit``) and map them at the next start
(``-XX:SharedArchiveFile``), skipping that work.

* **One archive per program, Java and class path.** Its name hashes the ``java`` binary
  (path, size, mtime) and the jars (name, size, mtime: a venv made again at the same path
  has new jars); an upgrade of either writes a new one. Java refuses
  an archive whose class path differs and starts without it (its complaint is silenced:
  the only cost is the lost speed).
* **Written once,** by the first JVM that exits when there is no archive and no other JVM
  is writing one: after pidquota's Python has gone (about 15 s on 2 cores, 180 MB), to
  ``NAME-KEY.PID-RANDOM.tmp``, with the JVM's class path beside it (``.cp``).
* **Checked before use.** Java crashes (SIGBUS) on a truncated archive, as a JVM killed
  while writing leaves. So a later start takes a temporary archive untouched for
  :data:`WHOLE_AFTER_S`, maps it with ``java -Xshare:on -XX:+VerifySharedSpaces -version``
  on the same class path (0.3 s; the checksums catch a corrupt archive too), and renames it
  to ``NAME-KEY.jsa`` (atomic) only if that JVM started; else deletes it.
* **Kept small:** the three newest archives per program name stay; an upgrade's older
  ones go, and so do another key's temporary archives untouched for a day (a deleted
  venv's: no start of its own would ever check them).
* **Only a JVM pidquota starts itself** gets it: not spark-submit's, and not one given
  ``spark.driver.extraJavaOptions`` of the user's own.

Worked example (``pidquota run --once`` over 12 small files, 2 cores, 4 runs each):
33.7 s without the archive, 28.2 s with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

WHOLE_AFTER_S = 20.0  # a JVM writes its archive in ~15 s without pause; untouched this long, it is done
STARTED_WITHIN_S = 60.0  # a JVM whose class path was recorded this recently may still write one
# another Java's or Spark's temporary archive untouched this long (a deleted venv's; no start
# of its own key comes to check it): removed, ~180 MB each
STALE_S = 86400.0
ORPHAN_S = 7 * 86400.0  # a class path with no archive beside it, this old: its JVM is long gone
CHECK_TIMEOUT_S = 30.0
QUIET = "-Xlog:cds=off,cds+dynamic=off"  # "skipping class X" lines, a refused archive


@dataclass(frozen=True)
class Archive:
    """A JVM's archive options; ``writing``: the temporary archive it writes as it exits
    (None: it maps one, or there is none to write). Give the JVM's class path to
    :meth:`record_class_path` once it runs, unless :func:`prepare` had it."""

    options: str = ""
    writing: Path | None = None

    def record_class_path(self, class_path: str) -> None:
        if self.writing is not None:  # without it the archive is never used: only the speed is lost
            with contextlib.suppress(OSError):
                self.writing.with_suffix(".cp").write_text(class_path)


def prepare(
    folder: str,
    java: str,
    jars: Path,
    name: str = "spark",
    class_path: str | None = None,
    now: float | None = None,
) -> Archive:
    """The options of a JVM that runs ``java`` on the jars in ``jars``, with the archive of
    ``name`` under ``folder`` (empty: none): map it if there is one, else write one as it
    exits, unless another JVM is writing one now."""
    if not folder or any(c.isspace() or c in "\"'" for c in str(Path(folder).expanduser())):
        return Archive()  # off; or a path Spark would split (extraJavaOptions splits on spaces)
    base = Path(folder).expanduser()
    try:
        base.mkdir(parents=True, exist_ok=True)
        key = f"{name}-{_key(java, jars)}"
        archive = base / f"{key}.jsa"
        pending = _promote(base, key, archive, java, time.time() if now is None else now)
    except OSError:
        return Archive()  # an unwritable cache costs the speed, not the run
    if archive.is_file():
        return Archive(f"-XX:SharedArchiveFile={archive} {QUIET}")
    if pending:
        return Archive()
    writing = base / f"{key}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    out = Archive(f"-XX:ArchiveClassesAtExit={writing} {QUIET}", writing)
    if class_path is not None:
        out.record_class_path(class_path)
    return out


def java_options(folder: str, java: str, jars: Path, now: float | None = None, name: str = "spark") -> str:
    """:func:`prepare`'s options alone, for a JVM whose class path is ``jars/*``."""
    return prepare(folder, java, jars, name, class_path=f"{jars}/*", now=now).options


def _key(java: str, jars: Path) -> str:
    """The archive's key: the ``java`` binary and each jar by name, size and modification time,
    what Java checks before it maps an archive ("A jar file is not the one used while building
    the shared archive file"). A venv made again at the same path has new jars: a new key, not
    an archive Java refuses at every start."""
    real = Path(java).resolve()
    stat = real.stat()
    found = [(p.name, p.stat()) for p in jars.glob("*.jar")] if jars.is_dir() else []
    named = [f"{name} {st.st_size} {int(st.st_mtime)}" for name, st in sorted(found)]
    text = "\n".join([str(real), str(stat.st_size), str(int(stat.st_mtime)), str(jars.resolve()), *named])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _mtime(path: Path) -> float | None:
    """``path``'s modification time, or None if another process removed it meanwhile."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def _promote(base: Path, key: str, archive: Path, java: str, now: float) -> bool:
    """Check and promote the temporary archives of ``key`` that are whole; True while one
    is still being written (or waits for its check), or a JVM that may write one started
    less than :data:`STARTED_WITHIN_S` ago. Another process promoting or deleting the same
    files meanwhile is no error."""
    pending = False
    temps = [(t, p) for p in base.glob(f"{key}.*.tmp") if (t := _mtime(p)) is not None]
    for mtime, tmp in sorted(temps, key=lambda tp: -tp[0]):
        if now - mtime < WHOLE_AFTER_S:
            pending = True
            continue
        class_path = tmp.with_suffix(".cp")
        try:
            if not archive.exists() and class_path.is_file() and _maps(java, tmp, class_path.read_text()):
                os.replace(tmp, archive)
        except FileNotFoundError:
            pass
        tmp.unlink(missing_ok=True)
        class_path.unlink(missing_ok=True)
    for orphan in base.glob(f"{key}.*.cp"):  # a JVM that will write at its exit, or never (killed)
        age = now - (_mtime(orphan) or now)
        if orphan.with_suffix(".tmp").exists():
            continue
        if age < STARTED_WITHIN_S:
            pending = True  # JVMs started together (a test's 3 brokers): one writes, not each
    _prune(base, key, now)
    return pending


def _prune(base: Path, key: str, now: float, keep: int = 3) -> None:
    """Archives of other Java or jar versions (an upgrade's leftovers, ~180 MB each): the
    ``keep`` newest of the program's name stay. Another key's temporary archive untouched
    for :data:`STALE_S` goes with its class path, since only a start with that key would
    check it; a class path alone (a JVM that never wrote) after :data:`ORPHAN_S`, unless the
    process that prepared it still runs."""
    name = key.rsplit("-", 1)[0]
    others = [(t, p) for p in base.glob(f"{name}-*.jsa") if p.stem != key and (t := _mtime(p)) is not None]
    for _, old in sorted(others, key=lambda tp: -tp[0])[max(keep - 1, 0) :]:
        old.unlink(missing_ok=True)
    for left in base.glob(f"{name}-*.tmp"):  # a JVM writes its .tmp as it exits, in ~15 s
        if _older(left, now, STALE_S):  # (the own key's were checked by _promote already)
            left.unlink(missing_ok=True)
            left.with_suffix(".cp").unlink(missing_ok=True)
    for left in base.glob(f"{name}-*.cp"):  # a JVM still running may write its .tmp at exit
        if not left.with_suffix(".tmp").exists() and _older(left, now, ORPHAN_S) and not _alive(left):
            left.unlink(missing_ok=True)


def _older(path: Path, now: float, seconds: float) -> bool:
    """Was ``path`` last touched more than ``seconds`` before ``now`` (False: gone meanwhile)?"""
    mtime = _mtime(path)
    return mtime is not None and now - mtime > seconds


def _alive(class_path: Path) -> bool:
    """Does the process that prepared ``KEY.PID-RANDOM.cp`` still run (a driver of weeks, whose
    JVM writes its archive as it exits)? A reused PID only keeps the file longer."""
    try:
        pid = int(class_path.name.split(".")[1].split("-")[0])
        os.kill(pid, 0)
    except (ValueError, IndexError, ProcessLookupError):
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _maps(java: str, tmp: Path, class_path: str) -> bool:
    """Does a JVM on ``class_path`` start with ``tmp`` mapped (``-Xshare:on`` fails otherwise)?"""
    try:
        done = subprocess.run(
            [
                java,
                "-cp",
                class_path,
                f"-XX:SharedArchiveFile={tmp}",
                "-Xshare:on",
                "-XX:+VerifySharedSpaces",  # its checksums: a corrupt (not only a short) archive fails
                "-XX:ErrorFile=/dev/null",  # a truncated archive crashes this JVM: no hs_err file in the cwd
                "-XX:-CreateCoredumpOnCrash",
                *QUIET.split(),
                "-version",
            ],
            capture_output=True,
            timeout=CHECK_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
