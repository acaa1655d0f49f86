"""Following growing files (``--follow``): the new bytes of a file that grows are read, a
rolled file is known as the same stream, and a crash replays exactly. Spark-free: the file
source (``pidquota.sources.files``) calls it on the driver.

A broker appends to ``kafka-request.log`` and rolls it every hour by renaming it
(``kafka-request.log.2026-11-24-13``) and starting a new one. So a file is known by its
identity, not its name: the device and inode (``dev:ino``), checked by a fingerprint
of its first bytes (``HEAD_BYTES``) so that an inode reused by a new file is not taken for
the old one.

* **Offsets.** An offset is every followed file's read position:
  ``{"follow": {"dev:ino": [path, generation, position, head_length, head]}, "parked": K}``.
  A batch reads, for each file, the bytes between its position in the start offset and
  in the end offset. Spark keeps both in the checkpoint, so a batch replayed after a
  crash reads exactly the same bytes: nothing lost, nothing twice.
* **Whole lines.** A position is always just after a ``\\n``: a line being written is
  read once it is complete. A last line without a newline is read once its file has not
  changed for ``QUIET_S`` seconds.
* **Rolled, cut, replaced.** A renamed file keeps its identity and position. A file
  cut shorter than its position (``copytruncate``) is named in a warning and read again
  from its start, as a new generation; so is an inode that now holds another file.
* **Parked.** A file read to its end and unchanged for ``PARK_AFTER_S`` (a rolled log)
  leaves the offset for a ledger beside the checkpoint (``pidquota-follow.jsonl``), so
  offsets stay as small as the set of live files; ``K`` is how many ledger lines an
  offset relies on. A parked file that grows again comes back where it stopped.

Latency: new lines are read at the next trigger (``pidquota.trigger.interval.ms``) after
they are complete.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pidquota.formats.recognise as sniff
from pidquota.conf import jsontext
from pidquota.conf.errors import CorruptStateError
from pidquota.conf.formats import entry
from pidquota.sources.listing import scan

log = logging.getLogger("pidquota.files")

LEDGER = "pidquota-follow.jsonl"
HEAD_BYTES = 256
QUIET_S = 10.0
PARK_AFTER_S = 900.0


@dataclass
class Followed:
    """One followed file in an offset."""

    path: str
    gen: int
    pos: int
    head_len: int
    head: str

    def to_json(self) -> list:
        return [self.path, self.gen, self.pos, self.head_len, self.head]

    @classmethod
    def from_json(cls, value: list) -> Followed:
        return cls(str(value[0]), int(value[1]), int(value[2]), int(value[3]), str(value[4]))


@dataclass(frozen=True)
class Chunk:
    """Bytes [start, end) of the file known as ``key``, last seen at ``path``."""

    key: str
    path: str
    start: int
    end: int


def follows(config) -> bool:
    """Whether a file input is followed (``pidquota.input.follow``; ``auto``: as the format's
    registry line says, on for the request log)."""
    value = config["pidquota.input.follow"]
    return value == "true" or (value == "auto" and entry(config["pidquota.input.format"]).follow)


def initial() -> dict:
    return {"follow": {}, "parked": 0}


def _entries(offset: dict) -> dict[str, Followed]:
    if "follow" not in offset:
        raise CorruptStateError(
            f"this checkpoint's file offsets ({json.dumps(offset)[:60]}) are those of a file input read once, "
            "not followed; run without --follow, or start over with --fresh (or another --output)"
        )
    return {k: Followed.from_json(v) for k, v in offset["follow"].items()}


def _head(f, length: int) -> str:
    """The fingerprint of an open file's first ``length`` bytes."""
    f.seek(0)
    return hashlib.blake2b(f.read(length), digest_size=12).hexdigest()


def _complete_end(f, pos: int, size: int, quiet: bool) -> int:
    """Just after the last ``\\n`` in bytes [pos, size) of an open file (``pos`` if none);
    ``size`` when the file is quiet, so that a last line without a newline is read too."""
    if quiet or size <= pos:
        return max(pos, size)
    at = size
    while at > pos:
        begin = max(pos, at - (1 << 16))
        f.seek(begin)
        block = f.read(at - begin)
        nl = block.rfind(b"\n")
        if nl >= 0:
            return begin + nl + 1
        at = begin
    return pos


@dataclass
class _Look:
    """One listed file, opened: its identity and size, read through the same handle so that
    a roll between the listing and the read cannot mix two files up."""

    path: str
    key: str
    st: os.stat_result
    f: object


class Follower:
    """The driver's side of following ``root``: the next offset, and a batch's chunks."""

    def __init__(self, root: str, ledger: Path, clock=time.time, fmt: str | None = None):
        self.root, self.ledger, self.clock = root, Path(ledger), clock
        self.fmt = fmt  # the input's format: a new file it cannot read is not followed (formats/recognise.py)
        self.parked: list[tuple[str, Followed]] = self._read_ledger()
        self._looked: dict[str, tuple[int, int]] = {}  # key -> (size, mtime_ns) when last fingerprinted
        self._sniffed: dict[str, bool] = {}  # key -> whether the format can read it

    def _listed(self) -> list[str]:
        """The files to follow, oldest first. A file named as the input is followed with the
        files its roll renames it to (``kafka-request.log`` and ``kafka-request.log.*``)."""
        root = Path(self.root)
        if root.is_dir():
            return [f.path for f in scan(root).files]
        folder = root.parent
        return [
            f.path
            for f in scan(folder).files
            if Path(f.path).parent == folder and Path(f.path).name.startswith(root.name)
        ]

    # -- the parked ledger -------------------------------------------------------------
    def _read_ledger(self) -> list[tuple[str, Followed]]:
        try:
            lines = self.ledger.read_text(encoding="utf-8").split("\n")[:-1]
        except FileNotFoundError:
            return []
        except UnicodeDecodeError:  # pidquota writes ASCII JSON: another byte is damage
            raise CorruptStateError(
                f"{self.ledger} is damaged (bytes that are not UTF-8); it lists the followed files read to "
                "their end. Start over with --fresh (or another --output)"
            ) from None
        out = []
        for n, line in enumerate(lines, start=1):
            try:
                d = jsontext.loads(line)
                out.append((d["key"], Followed.from_json(d["file"])))
            except (ValueError, KeyError, TypeError, IndexError):
                raise CorruptStateError(
                    f"{self.ledger} line {n} is damaged ({line[:80]!r}); it lists the followed files read to "
                    "their end. Start over with --fresh (or another --output)"
                ) from None
        return out

    def _park(self, parked: list[tuple[str, Followed]], upto: int) -> None:
        """Keep the ledger's first ``upto`` lines (what the last offset relies on) and append."""
        self.parked = self.parked[:upto] + parked
        self.ledger.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps({"key": k, "file": f.to_json()}) + "\n" for k, f in self.parked)
        tmp = self.ledger.with_name(self.ledger.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.ledger)

    def _parked_entry(self, key: str, upto: int) -> Followed | None:
        if len(self.parked) < upto:
            raise CorruptStateError(
                f"the checkpoint's offsets rely on {upto} lines of {self.ledger}, which has {len(self.parked)}; "
                "it was edited or lost. Start over with --fresh (or another --output)"
            )
        for k, f in reversed(self.parked[:upto]):
            if k == key:
                return f
        return None

    # -- offsets -------------------------------------------------------------------------
    def advance(self, start: dict) -> dict:
        """The offset after ``start``: every followed file read up to its last whole line."""
        before = _entries(start)
        upto = int(start.get("parked", 0))
        now = self.clock()
        after: dict[str, Followed] = {}
        sizes: dict[str, os.stat_result] = {}
        listed = self._listed()
        missing = [locate(k, e.path) for k, e in before.items() if k not in {_key(p) for p in listed}]
        for path in [*listed, *filter(None, missing)]:  # a file renamed since the listing is found
            try:
                with open(path, "rb") as f:
                    look = _Look(path, "", os.fstat(f.fileno()), f)
                    look.key = f"{look.st.st_dev}:{look.st.st_ino}"
                    if look.key in after:
                        continue
                    entry = self._advance_one(look, before.get(look.key), upto, now)
            except OSError:
                continue  # gone or unreadable since the listing: next time
            if entry is not None:
                after[look.key], sizes[look.key] = entry, look.st
        for key, old in before.items():
            if key not in after and self._sniffed.get(key) is not False:  # a refused file is not gone
                log.warning("pidquota: %s is gone (deleted, or moved out of %s)", old.path, self.root)
        parked = [
            (key, e)
            for key, e in after.items()
            if key in before
            and (before[key].gen, before[key].pos) == (e.gen, e.pos) == (e.gen, sizes[key].st_size)
            and now - sizes[key].st_mtime > PARK_AFTER_S
        ]
        if parked:
            self._park(parked, upto)
            for key, _ in parked:
                del after[key]
        return {"follow": {k: e.to_json() for k, e in after.items()}, "parked": upto + len(parked)}

    def _advance_one(self, look: _Look, known: Followed | None, upto: int, now: float) -> Followed | None:
        """A listed file's entry in the next offset, or None while it stays parked."""
        parked = None
        if known is None:
            parked = self._parked_entry(look.key, upto)
            known = replace(parked) if parked else None
        entry = self._place(look, known)
        if parked is not None and (entry.gen, entry.pos) == (parked.gen, look.st.st_size):
            return None  # parked and unchanged: it stays out of the offsets
        if entry.pos == 0 and not self._readable(look, now - look.st.st_mtime > QUIET_S):
            return None  # not followed: named once, and the others go on
        entry.pos = _complete_end(look.f, entry.pos, look.st.st_size, now - look.st.st_mtime > QUIET_S)
        return entry

    def _readable(self, look: _Look, quiet: bool) -> bool:
        """Whether the input's format can read a file not read yet, from its first lines
        (``formats/recognise.py``). Until a whole line is there (or the file is quiet) it is not judged,
        and nothing of it is read anyway."""
        if self.fmt is None or look.st.st_size == 0:
            return True
        known = self._sniffed.get(look.key)
        if known is not None:
            return known
        look.f.seek(0)
        head = look.f.read(sniff.HEAD)
        if b"\n" not in head and not quiet and not head.startswith(b"\x1f\x8b"):
            return True
        why = sniff.problem(look.path, self.fmt, sniff.kind_of(head))
        self._sniffed[look.key] = why is None
        if why is not None:
            log.warning("pidquota: %s; it is not followed, and the stream goes on", why)
        return why is None

    def _place(self, look: _Look, known: Followed | None) -> Followed:
        """The file's entry: where it was, or a new generation from its start when it is new,
        was cut shorter than its position, or its inode now holds another file."""
        size, path = look.st.st_size, look.path
        if known is not None and size < known.pos:
            log.warning(
                "pidquota: %s was cut shorter (%d bytes, %d already read); reading it again from its start. "
                "Roll the log by renaming it (log4j's own rolling), not by copytruncate",
                path,
                size,
                known.pos,
            )
            known = Followed(path, known.gen + 1, 0, 0, _head(look.f, 0))
        elif known is not None and self._looked.get(look.key) != (size, look.st.st_mtime_ns):
            self._looked[look.key] = (size, look.st.st_mtime_ns)
            if _head(look.f, known.head_len) != known.head:  # another file under a reused inode
                known = Followed(path, known.gen + 1, 0, 0, _head(look.f, 0))
        if known is None:
            known = Followed(path, 0, 0, 0, _head(look.f, 0))
        if known.head_len < HEAD_BYTES and size > known.head_len:
            known.head_len = min(size, HEAD_BYTES)
            known.head = _head(look.f, known.head_len)
        known.path = path
        return known

    def chunks(self, start: dict, end: dict) -> list[Chunk]:
        """The bytes a batch from ``start`` to ``end`` reads, file by file."""
        before, after = _entries(start), _entries(end)
        upto = int(start.get("parked", 0))
        out = []
        for key, e in after.items():
            b = before.get(key) or self._parked_entry(key, upto)
            begin = b.pos if b is not None and b.gen == e.gen else 0
            if e.pos > begin:
                out.append(Chunk(key, e.path, begin, e.pos))
        return out


def _key(path: str) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}"


def locate(chunk_key: str, path: str) -> str | None:
    """Where the file known as ``chunk_key`` is now: ``path``, or the file with that identity
    in the same folder (renamed by a roll since it was listed or planned)."""
    if _key(path) == chunk_key:
        return path
    try:
        names = sorted(os.listdir(Path(path).parent))
    except OSError:
        return None
    return next(
        (str(Path(path).parent / n) for n in names if _key(str(Path(path).parent / n)) == chunk_key), None
    )
