"""A file input's files looked at before Spark reads them: the first lines of each say what
it holds, so a wrong ``--input-format``, a compressed file or a binary one is one line at
start-up, instead of every line turned into a dead letter (issue 35: forgetting
``--input-format kafka-request-log`` once copied a 143 MB request log into dead letters).

Each file's head (:data:`HEAD` bytes, at most :data:`LINES` lines) is one of:

* ``gzip``: it starts with gzip's magic bytes (``1f 8b``);
* ``binary``: most lines hold a NUL byte, or bytes that are not UTF-8;
* ``request-log``: most lines are a broker's request-log completions (``Completed
  request:``, raw or inside a log shipper's JSON);
* ``events``: most lines are JSON objects with a ``principal`` or ``producer_id``;
* ``text``: anything else (the screen names each bad line in the dead letters), or empty.

Worked example: with ``--input-format events``, a folder holding ``kafka-request.log``
(request-log lines) fails with ``in/kafka-request.log holds Kafka request-log lines, not
JSON events: add --input-format kafka-request-log``; the same folder with that flag passes.
Spark-free and pure: it reads the files' first bytes, nothing else.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from pidquota.conf import jsontext
from pidquota.conf.errors import InputError

HEAD = 16_384  # bytes read from each file
LINES = 20  # lines of the head looked at
MAX_FILES = 500  # the first files in read order; a larger folder is sampled no further

_FIX = {
    (
        "events",
        "request-log",
    ): "holds Kafka request-log lines, not JSON events: add --input-format kafka-request-log",
    ("kafka-request-log", "events"): (
        "holds JSON events, not Kafka request-log lines: drop --input-format kafka-request-log "
        "(JSON events are --input-format events)"
    ),
}


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
    if "Completed request:" in text:
        return "request-log"
    if text.startswith("{"):
        try:
            value = jsontext.loads(text)
        except ValueError:
            return "text"
        if isinstance(value, dict) and ("principal" in value or "producer_id" in value):
            return "events"
    return "text"


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
    fix = _FIX.get((fmt, kind))
    return f"{path} {fix}" if fix else None


def problem_of(path: str, fmt: str) -> str | None:
    """What is wrong with reading the file at ``path`` as ``fmt`` (a file that cannot be
    opened now is left to the reader, which says so)."""
    head = _head(path)
    return None if head is None else problem(path, fmt, kind_of(head))


def check_files(paths: Iterable[str], fmt: str) -> None:
    """An :class:`InputError` naming the first file that ``fmt`` cannot read, with the fix,
    and how many more there are; nothing for a format without files (``record-batches``).

    A file of the other format stops the run (the flag is likely wrong). A gzip or binary
    file among files that can be read does not: the source names it and passes over it (a
    log folder rotated by logrotate holds ``.gz`` files); only a folder of nothing else
    stops."""
    if fmt not in ("events", "kafka-request-log"):
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
        elif kind not in ("gzip", "binary") or not readable:
            found.append((kind, line))
    other = [line for kind, line in found if kind not in ("gzip", "binary")]
    if other or (found and not readable):
        lines = other or [line for _, line in found]
        more = f" ({len(lines) - 1} more file(s) like it)" if len(lines) > 1 else ""
        raise InputError(f"{lines[0]}{more}; nothing was read")


class FormatGuard:
    """A running query's first records, judged like a file's head: a Kafka input (or any
    other) whose records are the other format stops the run after ``WATCH`` records at most,
    with one line naming the flag, instead of turning a topic into dead letters.

    Fed per batch: the dead letters' raw text, and how many records the batch had (events,
    dead letters and skipped lines). It watches the run's batches until ``WATCH`` records
    have gone by; it trips when at least ``MIN_LINES`` of the records seen, and more than
    half of them, are the other format: dead letters whose text is request-log lines
    (``--input-format events``), or lines that are no request-log line at all, with no
    request-log line among them (``--input-format kafka-request-log``; one request-log line
    of any API key ends the watch). Example:
    ``events`` over a topic of 500 request-log lines, one batch: 500 dead letters, 500 of them
    request-log lines: it raises ``InputError('... records of kafka://b/t hold Kafka
    request-log lines, not JSON events: add --input-format kafka-request-log ...')``.
    """

    WATCH = 1000
    MIN_LINES = 20

    def __init__(self, fmt: str, where: str):
        self.fmt, self.where = fmt, where
        self.seen = 0
        self.other = 0

    @property
    def watching(self) -> bool:
        return self.seen < self.WATCH and self.fmt in ("events", "kafka-request-log")

    def add(
        self, dead_raw: list, records: int, not_requests: int = 0, events: int = 0, request_lines: int = 0
    ) -> None:
        """One batch; raises :class:`InputError` when the records are the other format.
        ``request_lines``: lines the request-log screen knew as request-log lines (any API key)."""
        if not self.watching or records <= 0:
            return
        if self.fmt == "events":
            lines = [r.encode("utf-8", "replace") if isinstance(r, str) else r for r in dead_raw if r]
            self.other += sum(_line_kind(line) == "request-log" for line in lines[: self.WATCH])
            other = "request-log"
        elif events or request_lines:  # a request log, whatever else the lines hold: watched enough
            self.seen = self.WATCH
            return
        else:
            self.other += not_requests
            other = "text"  # skipped lines keep no text: what they are is not known
        self.seen += records
        if self.other >= self.MIN_LINES and self.other * 2 > self.seen:
            fix = _FIX.get((self.fmt, other), "").replace("holds", "hold") or (
                "are not Kafka request-log lines: is --input-format right? (JSON events are --input-format events)"
            )
            raise InputError(
                f"{self.other:,} of the first {self.seen:,} records of {self.where} {fix}; the run stops "
                "here, and this batch is not written"
            )
