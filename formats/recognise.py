"""A file input's files looked at before Spark reads them: the first lines of each say what
it holds, so a wrong ``--input-format``, a compressed file or a binary one is one line at
start-up, instead of every line turned into a dead letter (issue 35: forgetting
``--input-format kafka-request-log`` once copied a 143 MB request log into dead letters).

Each file's head (:data:`HEAD` bytes, at most :data:`LINES` lines) is one of:

* ``gzip``: it starts with gzip's magic bytes (``1f 8b``);
* ``binary``: most lines hold a NUL byte, or bytes that are not UTF-8;
* a format's name: most lines are that format's records, as its ``recognise`` says (the
  first format of the registry that claims a line has it): ``events`` for JSON objects with
  a ``principal`` or ``producer_id``, ``kafka-request-log`` for a broker's request-log
  completions (``Completed request:``, raw or inside a log shipper's JSON);
* ``text``: anything else (the screen names each bad line in the dead letters), or empty.

Worked example: with ``--input-format events``, a folder holding ``kafka-request.log``
(request-log lines) fails with ``in/kafka-request.log holds Kafka request-log lines, not
JSON events: add --input-format kafka-request-log``; the same folder with that flag passes.
Spark-free and pure: it reads the files' first bytes, nothing else. It knows no format by
name: it asks each one of the registry (``pidquota.formats``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import pidquota.formats as formats
from pidquota.conf import formats as registry
from pidquota.conf.errors import InputError

HEAD = 16_384  # bytes read from each file
LINES = 20  # lines of the head looked at
MAX_FILES = 500  # the first files in read order; a larger folder is sampled no further

NOT_READ = ("gzip", "binary")  # kinds no format reads: passed over among readable files


def fix(fmt: str, kind: str) -> str | None:
    """What to say of a file (or records) of ``kind`` read as ``fmt``: the flag to give, or
    None when ``kind`` is no other format. E.g. ``fix("events", "kafka-request-log")`` is
    ``"holds Kafka request-log lines, not JSON events: add --input-format kafka-request-log"``."""
    if kind == fmt or kind not in registry.names():
        return None
    noun, read = registry.entry(kind).noun, registry.entry(fmt).noun
    if kind == registry.DEFAULT:
        flag = f"drop --input-format {fmt} ({noun} are --input-format {kind})"
    else:
        flag = f"{'add' if fmt == registry.DEFAULT else 'give'} --input-format {kind}"
    return f"holds {noun}, not {read}: {flag}"


def kind_of(head: bytes) -> str:
    """What a file's first bytes say it holds (see the module docstring)."""
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    lines = head.split(b"\n")
    if len(head) == HEAD and len(lines) > 1:
        lines = lines[:-1]  # the last may be cut mid-line
    kinds = Counter(_line_kind(line) for line in lines[:LINES] if line.strip())
    if not kinds:
        return "text"
    kind, n = kinds.most_common(1)[0]
    return kind if n * 2 > sum(kinds.values()) else "text"


def _line_kind(line: bytes) -> str:
    """One line's kind: a few bad lines among good ones are the screen's to name (dead letters),
    not a reason to refuse the file."""
    if b"\x00" in line:
        return "binary"
    try:
        text = line.decode("utf-8").strip()
    except UnicodeDecodeError:
        return "binary"
    return next((f.entry.name for f in _line_formats() if f.recognise(text)), "text")


def _line_formats() -> list:
    """The formats whose records are lines, in the registry's order."""
    return [f for f in formats.every() if f.reads == "lines"]


def _head(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(HEAD)
    except OSError:  # gone or unreadable since the listing: the source says so when it reads
        return None


def problem(path: str, fmt: str, kind: str) -> str | None:
    """The line that says what is wrong with a file of ``kind`` read as ``fmt``, or None."""
    if kind == "gzip":
        return f"{path} is gzip-compressed, and pidquota reads plain-text lines: unpack it (gunzip {path}) or move it out of the input"
    if kind == "binary":
        return f"{path} is not a text file (NUL bytes, or not UTF-8): move it out of the input"
    said = fix(fmt, kind)
    return f"{path} {said}" if said else None


def problem_of(path: str, fmt: str) -> str | None:
    """What is wrong with reading the file at ``path`` as ``fmt`` (a file that cannot be
    opened now is left to the reader, which says so)."""
    head = _head(path)
    return None if head is None else problem(path, fmt, kind_of(head))


def check_files(paths: Iterable[str], fmt: str) -> None:
    """An :class:`InputError` naming the first file that ``fmt`` cannot read, with the fix,
    and how many more there are; nothing for a format that no file holds (``record-batches``).

    A file of the other format stops the run (the flag is likely wrong). A gzip or binary
    file among files that can be read does not: the source names it and passes over it (a
    log folder rotated by logrotate holds ``.gz`` files); only a folder of nothing else
    stops."""
    if "file" not in registry.entry(fmt).inputs:
        return
    found, readable = [], 0
    for i, path in enumerate(paths):
        if i >= MAX_FILES:
            break
        head = _head(path)
        kind = None if head is None else kind_of(head)
        line = None if kind is None else problem(path, fmt, kind)
        if line is None:
            readable += 1
        elif kind not in NOT_READ or not readable:
            found.append((kind, line))
    other = [line for kind, line in found if kind not in NOT_READ]
    if other or (found and not readable):
        lines = other or [line for _, line in found]
        more = f" ({len(lines) - 1} more file(s) like it)" if len(lines) > 1 else ""
        raise InputError(f"{lines[0]}{more}; nothing was read")


class FormatGuard:
    """A running query's first records, judged like a file's head: a Kafka input (or any
    other) whose records are another format stops the run after ``WATCH`` records at most,
    with one line naming the flag, instead of turning a topic into dead letters.

    Fed per batch: the dead letters' raw text, how many records the batch had (events, dead
    letters and skipped lines), its skipped counts by kind and its events. It watches the
    run's batches until ``WATCH`` records have gone by, for formats whose records are lines;
    it trips when at least ``MIN_LINES`` of the records seen, and more than half of them, are
    not the format's:

    * a format without a ``foreign`` kind (``events``) counts its dead letters that another
      format recognises;
    * a format with one (``kafka-request-log``: ``not-a-request``) counts the lines its screen
      skipped as foreign, and stops watching at its first record of any kind (an event, or a
      line it skipped as its own, such as a FETCH).

    Example: ``events`` over a topic of 500 request-log lines, one batch: 500 dead letters, 500
    of them request-log lines: it raises ``InputError('500 of the first 500 records of
    kafka://b/t hold Kafka request-log lines, not JSON events: add --input-format
    kafka-request-log; ...')``.
    """

    WATCH = 1000
    MIN_LINES = 20

    def __init__(self, fmt: str, where: str):
        self.fmt, self.where = fmt, where
        self.format = formats.get(fmt)
        self.seen = 0
        self.other: Counter = Counter()  # records that are not the format's, by kind

    @property
    def watching(self) -> bool:
        return self.seen < self.WATCH and self.format.reads == "lines"

    def add(self, dead_raw: list, records: int, skipped: Mapping | None = None, events: int = 0) -> None:
        """One batch; raises :class:`InputError` when its records are another format."""
        if not self.watching or records <= 0:
            return
        skipped = {what: int(n or 0) for what, n in (skipped or {}).items()}
        foreign = self.format.foreign
        if foreign is None:
            lines = [r.encode("utf-8", "replace") if isinstance(r, str) else r for r in dead_raw if r]
            kinds = (_line_kind(line) for line in lines[: self.WATCH])
            self.other.update(k for k in kinds if k != self.fmt and k in registry.names())
        elif events or any(n for what, n in skipped.items() if what != foreign):
            self.seen = self.WATCH  # the format's own records, whatever else there is: watched enough
            return
        else:
            self.other["text"] += skipped.get(foreign, 0)  # skipped lines keep no text
        self.seen += records
        n = sum(self.other.values())
        if n >= self.MIN_LINES and n * 2 > self.seen:
            raise InputError(
                f"{n:,} of the first {self.seen:,} records of {self.where} {self._said()}; the run stops "
                "here, and this batch is not written"
            )

    def _said(self) -> str:
        kind = self.other.most_common(1)[0][0]
        said = (fix(self.fmt, kind) or "").replace("holds", "hold", 1)
        if said:
            return said
        default = registry.entry(registry.DEFAULT)
        return (
            f"are not {self.format.entry.noun}: is --input-format right? ({default.noun} are "
            f"--input-format {default.name})"
        )
