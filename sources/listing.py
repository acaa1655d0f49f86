"""Which files a file input reads, in which order, and the ledger of files taken. Spark-free:
the CLI's start-up checks use it before Spark starts, and the file source
(``pidquota.sources.files``) lists through it.

* **Order.** New files are taken by (modification time, path): ties are broken
  by the path, so a folder written in one go is read the same way every time.
* **The ledger.** Every file taken is appended to a ledger in the checkpoint
  (``pidquota-files.jsonl``: path, mtime_ns, size) before its offset is
  returned.
* **Names.** A file named on the command line is read whatever its name. In a
  folder (subfolders included), names starting with ``_`` or ``.`` or ending in
  ``.tmp`` or ``._COPYING_`` are skipped and named in a warning (the in-progress
  ones at start-up only).
* **Changed files.** A file is read once. One changed after it was read (new
  size or modification time) is named in a warning and not read again.
* **Empty files** are left for a later listing (the file source takes a file
  once it has bytes). A file still being written under an in-progress name
  (``.tmp``, ``._COPYING_``) is passed over without a warning while a query runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from pidquota.conf import jsontext
from pidquota.conf.errors import CorruptStateError, InputError
from pidquota.conf.formats import DEFAULT

LEDGER = "pidquota-files.jsonl"


@dataclass(frozen=True)
class FileEntry:
    path: str  # absolute
    mtime_ns: int
    size: int

    def to_json(self) -> str:
        return json.dumps({"path": self.path, "mtime_ns": self.mtime_ns, "size": self.size})


@dataclass
class Listing:
    """What a listing found: readable files in read order, and what it skipped."""

    files: list[FileEntry]
    skipped: list[str]


def hidden(name: str) -> bool:
    """Names a folder listing passes over: ``_`` or ``.`` first (``_SUCCESS``, ``.part``), and
    files still being written by the usual conventions (:func:`in_progress`)."""
    return name.startswith(("_", ".")) or in_progress(name)


def dotted(name: str) -> bool:
    """A dot name, hidden by the convention ``ls`` and every shell keep (``.git``, ``.DS_Store``,
    ``pidquota generate``'s ``.kafka-request.log.summary.json`` beside the log it wrote): passed
    over without a word, as nobody expects it read."""
    return name.startswith(".")


def in_progress(name: str) -> bool:
    """A file still being written, to be renamed when complete: ``x.jsonl.tmp``, Hadoop's
    ``._COPYING_``. A running query passes over these without a warning."""
    return name.endswith((".tmp", "._COPYING_"))


def _entry(path: Path) -> FileEntry | None:
    try:
        st = path.stat()
    except OSError:  # renamed or removed since the folder was listed (log rotation): next listing
        return None
    return FileEntry(str(path), st.st_mtime_ns, st.st_size)


def scan(root: str | Path) -> Listing:
    """A named file, or every file below a folder whose path has no hidden part.

    What a folder listing passes over is in ``skipped``: hidden names (but dot names,
    :func:`dotted`), folders that cannot be read, and symbolic links to folders (not
    followed, so a link cannot make a file be read twice)."""
    root = Path(root).resolve()
    if root.is_file():
        entry = _entry(root)
        return Listing([entry] if entry else [], [])
    files, skipped = [], []
    for folder, dirs, names in os.walk(
        root, onerror=lambda e: skipped.append(f"{e.filename}{os.sep} ({e.strerror})")
    ):
        for d in sorted(dirs):
            if not dotted(d) and (hidden(d) or Path(folder, d).is_symlink()):
                skipped.append(str(Path(folder, d)) + os.sep)
        dirs[:] = [d for d in dirs if not hidden(d) and not Path(folder, d).is_symlink()]
        for name in names:
            path = Path(folder, name)
            if hidden(name):
                if not dotted(name):
                    skipped.append(str(path))
            elif path.is_file() and (entry := _entry(path)) is not None:
                files.append(entry)
    files.sort(key=lambda f: (f.mtime_ns, f.path))
    return Listing(files, sorted(skipped))


def read_ledger(path: str | Path) -> list[FileEntry]:
    """The ledger's entries. A torn last line (a crash mid-append) is left out; it is cut
    off before the next append (:func:`append_ledger`). Any other damage is an error:
    offsets are positions in the ledger, so a lost line would shift every later batch."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except UnicodeDecodeError:  # pidquota writes ASCII JSON: another byte is damage
        raise CorruptStateError(
            f"{path} is damaged (bytes that are not UTF-8); it lists the files this query has read. "
            "Start over with --fresh (or another --output)"
        ) from None
    lines = text.split("\n")
    complete, torn = lines[:-1], lines[-1]
    out = []
    for n, line in enumerate(complete, start=1):
        try:
            d = jsontext.loads(line)
            out.append(FileEntry(d["path"], int(d["mtime_ns"]), int(d["size"])))
        except (ValueError, KeyError, TypeError):
            raise CorruptStateError(
                f"{path} line {n} is damaged ({line[:80]!r}); it lists the files this query has read. "
                "Start over with --fresh (or another --output)"
            ) from None
    del torn  # no newline yet: the append it belongs to did not finish
    return out


def append_ledger(path: Path, entries: list[FileEntry]) -> None:
    """Append entries durably, first cutting off a torn last line a crash may have left."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as f:
        f.seek(0)
        data = f.read()
        keep = data.rfind(b"\n") + 1
        if keep != len(data):
            f.truncate(keep)
        f.seek(0, os.SEEK_END)
        f.write("".join(e.to_json() + "\n" for e in entries).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())


def changed_since_read(listing: Listing, ledger: list[FileEntry]) -> list[str]:
    """Files the ledger says were read that have since changed size or modification time."""
    known = {e.path: e for e in ledger}
    return [
        f.path
        for f in listing.files
        if f.path in known and (known[f.path].mtime_ns, known[f.path].size) != (f.mtime_ns, f.size)
    ]


def check_input(path: str | Path) -> None:
    """A file input that does not exist or cannot be read fails at start-up, naming it."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"input {str(path)!r} does not exist; give a JSON-lines file or a folder of them")
    if not os.access(p, os.R_OK) or (p.is_dir() and not os.access(p, os.X_OK)):
        raise InputError(f"input {str(path)!r} is not readable by this user")


def start_up_notes(root: str | Path, checkpoint: str | Path, fmt: str = DEFAULT) -> tuple[list[str], bool]:
    """Warnings for the operator before a file input starts, and whether the ledger
    already existed (so "nothing new since the checkpoint" rather than "read nothing").
    A file not read yet that ``fmt`` cannot read (``formats/recognise.py``) fails now."""
    from pidquota.formats.recognise import check_files

    check_input(root)
    listing = scan(root)
    ledger_path = Path(checkpoint) / LEDGER
    ledger = read_ledger(ledger_path)
    read = {entry.path for entry in ledger}
    check_files((f.path for f in listing.files if f.path not in read), fmt)
    notes = []
    if listing.skipped:
        shown = ", ".join(listing.skipped[:5]) + (
            f" and {len(listing.skipped) - 5} more" if len(listing.skipped) > 5 else ""
        )
        notes.append(
            f"warning: not reading {len(listing.skipped)} hidden name(s) in {root} (starting with '_', "
            f"or ending in .tmp or ._COPYING_): "
            f"{shown}; rename them, or name one file as --input, to read it"
        )
    changed = changed_since_read(listing, ledger)
    if changed:
        notes.append(
            f"warning: {len(changed)} file(s) changed after they were read, and are not read again: "
            f"{', '.join(changed[:5])}; a file is read once, so write new events to a new file"
        )
    if not listing.files:
        notes.append(f"warning: {root} has no files to read")
    elif not any(f.size for f in listing.files):
        notes.append(f"warning: {root} has only empty files so far; each is read once it has bytes")
    return notes, ledger_path.exists()
