"""Output files over time: per-batch parts rolled into one file per hour, old files deleted.

The sink writes ``part-<batch id>.jsonl`` per batch and kind, which a batch
Spark replays after a crash overwrites (exactly once per batch). At a 2 s
trigger that is about 43,000 files a day per kind, so:

* **Rolling** (``pidquota.output.roll.ms``): once the oldest part of a kind
  was written more than ``roll_ms`` ago, the parts of every batch *before*
  the current one are concatenated, in batch order, into
  ``roll-<first>-<last>.jsonl`` (written under a temporary name and renamed)
  and then deleted. Only committed batches are rolled: Spark replays only the
  batch in flight, which is the current one, so a replay never writes a batch
  that a roll holds. A crash between the rename and the deletes leaves parts
  that a roll covers; the next roll deletes them instead of rolling them
  again, and :func:`output_files` never lists them.
* **Retention** (``pidquota.output.retention.ms``): a file (part or roll)
  last written more than that long ago is deleted.

Times are file modification times against the ``now`` passed in (seconds).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPORT_FILE = "report.html"  # where `pidquota report OUTPUT` writes by default: pidquota's too
_NAME = re.compile(r"^(?:part-(\d+)|roll-(\d+)-(\d+))\.jsonl$")


def part_name(batch_id: int) -> str:
    return f"part-{batch_id:010d}.jsonl"


def roll_name(first: int, last: int) -> str:
    return f"roll-{first:010d}-{last:010d}.jsonl"


def batches_of(path: Path) -> tuple[int, int] | None:
    """The batch ids a file holds, first and last (a part: one), or None for other files."""
    m = _NAME.match(path.name)
    if m is None:
        return None
    if m.group(1) is not None:
        return int(m.group(1)), int(m.group(1))
    return int(m.group(2)), int(m.group(3))


def output_files(folder: Path) -> list[Path]:
    """A kind's files in batch order, without parts that a roll already holds."""
    files = [(batches_of(p), p) for p in folder.glob("*.jsonl") if p.is_file()]
    files = sorted((b, p) for b, p in files if b is not None)
    rolls = [b for b, p in files if p.name.startswith("roll-")]
    return [p for b, p in files if p.name.startswith("roll-") or not _covered(b[0], rolls)]


def _covered(batch_id: int, rolls: list[tuple[int, int]]) -> bool:
    return any(first <= batch_id <= last for first, last in rolls)


def roll(folder: Path, current_batch: int, roll_ms: int, now: float) -> Path | None:
    """Roll the parts of batches before ``current_batch`` once the oldest is ``roll_ms`` old;
    returns the new roll, or None. Parts a roll already holds are deleted first."""
    files = output_files(folder)
    rolls = [batches_of(p) for p in files if p.name.startswith("roll-")]
    ahead = [r for r in rolls if r[1] >= current_batch]
    if ahead:
        raise OutputClash(folder, ahead[-1][1], current_batch)
    for stale in folder.glob("part-*.jsonl"):  # left by a crash after a roll's rename
        b = batches_of(stale)
        if b is not None and _covered(b[0], rolls):
            stale.unlink(missing_ok=True)
    parts = [p for p in files if p.name.startswith("part-") and batches_of(p)[0] < current_batch]
    if not roll_ms or not parts or now - min(p.stat().st_mtime for p in parts) < roll_ms / 1000:
        return None
    target = folder / roll_name(batches_of(parts[0])[0], batches_of(parts[-1])[1])
    _concatenate(parts, target)
    for part in parts:
        part.unlink(missing_ok=True)
    return target


def _concatenate(parts: list[Path], target: Path) -> None:
    """``parts`` into ``target``, on disk (fsynced) before the parts may go, with the newest
    part's time (retention counts from it). A failure (a full disk) leaves no temporary file."""
    tmp = target.parent / f".{target.name}.tmp"
    newest = max(p.stat().st_mtime for p in parts)
    try:
        with tmp.open("wb") as out:
            for part in parts:
                data = part.read_bytes()
                out.write(data if not data or data.endswith(b"\n") else data + b"\n")
            out.flush()
            os.fsync(out.fileno())
        os.utime(tmp, (newest, newest))
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, target)


class OutputClash(OSError):
    """A roll file holds batches at or after the one running: the folder was written under
    another checkpoint (whose batch ids started again). Nothing is rolled or deleted."""

    def __init__(self, folder: Path, last: int, current: int) -> None:
        super().__init__(
            f"{folder} holds a roll up to batch {last} but the query is at batch {current}: it was "
            "written under another checkpoint; stop, and use another --output or --fresh"
        )


def expire(folder: Path, retention_ms: int, now: float) -> list[Path]:
    """Delete the parts and rolls last written more than ``retention_ms`` before ``now``."""
    if not retention_ms:
        return []
    old = [
        p for p in folder.glob("*.jsonl") if batches_of(p) and now - p.stat().st_mtime > retention_ms / 1000
    ]
    for path in old:
        path.unlink(missing_ok=True)
    return old
