"""Sightings as CSV (``--input-format csv``): one per line, for PIDs that some other tool saw.

A warehouse query, a proxy's export or a spreadsheet gives who used which producer id
when; ``principal,producer_id,timestamp`` is all pidquota needs, with ``producer_epoch``
and ``client_id`` after them if known::

    principal,producer_id,timestamp,producer_epoch,client_id
    User:alice,4000,1764000000000,0,app-1
    "User:CN=bob,OU=eng",4001,1764000000250

* **Fields** in that order (RFC 4180: a field holding a comma or a quote is quoted, a quote
  in it doubled; a TLS principal such as ``User:CN=bob,OU=eng`` must be quoted; a space is
  part of its field, as in a JSON string). 3 to 5 of them; an empty optional field is not
  known.
* **Types** as the JSON event's: ``producer_id`` an integer of int64 (negative: not
  idempotent, counted as ignored), ``timestamp`` ms since the epoch (0 to 9999-12-31),
  ``producer_epoch`` -1 to 32767 (default -1).
* **A header line**, whose first fields are ``principal`` and ``producer_id`` (quoted or
  not), is skipped and counted as ``csv header``: a file may have one, or one per export
  appended.
* **Anything else** is a dead letter with the first reason found, field by field: an empty
  line, too few or too many fields, a field that is not an integer or out of range, an
  empty or over-long principal.

The screen judges every line itself, in the executor's Python (one ``csv`` parse per
line: about 300k lines a second a core; this format is for exports, not a broker's flood),
so no line goes to a strict parse in Spark.

Worked example: the lines ``principal,producer_id,timestamp``, ``User:a,7,1000``,
``User:a,8,1500,0,app`` and ``User:a,x,1`` give one folded row (User:a, PIDs [7, 8], the
PID 8 named by client ``app``), a dead letter "field 'producer_id' must be an integer, got
'x'", and a count ``csv header`` 1.
"""

from __future__ import annotations

import csv
import json
from collections import Counter

import pyarrow as pa

from pidquota.conf.formats import entry
from pidquota.formats.folded import (
    FOLDED,
    as_binary,
    principal_problem,
    screened_rows,
    sources_of,
)

NAME = "csv"
HEADER = "csv header"  # skipped: a header line
MAX_LINE = 65_536  # characters: a sighting is far shorter, and csv's own field limit is 128 KiB
FIELDS = ("principal", "producer_id", "timestamp", "producer_epoch", "client_id")
_RANGES = {
    "producer_id": (-(2**63), 2**63 - 1),
    "timestamp": (0, 253_402_300_799_999),
    "producer_epoch": (-1, 32_767),
}


class BadRow(ValueError):
    """A line that is no sighting; its text is the reason."""


def _fields(text: str) -> list[str]:
    if not text.strip():
        raise BadRow("empty record")
    if len(text) > MAX_LINE:
        raise BadRow(f"a line of {len(text):,} characters, longer than a sighting can be ({MAX_LINE:,})")
    try:
        fields = next(csv.reader([text], strict=True))
    except (csv.Error, StopIteration):
        raise BadRow("not a CSV line (a quote left open, or text after a closing quote)") from None
    if not 3 <= len(fields) <= len(FIELDS):
        raise BadRow(f"{len(fields)} field(s); expected 3 to 5: {','.join(FIELDS)}")
    return fields


def _integer(fields: list[str], i: int) -> int | None:
    name, text = FIELDS[i], fields[i].strip() if i < len(fields) else ""
    if not text and i >= 3:
        return None
    digits = text.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()):
        raise BadRow(f"field '{name}' must be an integer, got {text[:40]!r}")
    low, high = _RANGES[name]
    value = int(text) if len(digits) <= 20 else None
    if value is None or not low <= value <= high:
        raise BadRow(f"field '{name}' is out of range ({low}..{high}): {text[:40]}")
    return value


def sighting(text: str, max_principal: int) -> dict:
    """One line's sighting; raises :class:`BadRow` with the reason."""
    fields = _fields(text)
    why = principal_problem(fields[0], max_principal)
    if why:
        raise BadRow(why)
    pid, timestamp, epoch = (_integer(fields, i) for i in (1, 2, 3))  # in field order
    return {
        "principal": fields[0],
        "producer_id": pid,
        "timestamp": timestamp,
        "producer_epoch": -1 if epoch is None else epoch,
        "client_id": fields[4] if len(fields) > 4 and fields[4] else None,
    }


def _is_header(text: str) -> bool:
    """A header line: its first two fields name the first two columns (quoted or not)."""
    if "producer_id" not in text[:200]:
        return False
    try:
        fields = next(csv.reader([text[:200]]))
    except (csv.Error, StopIteration):
        return False
    return [f.strip().lower() for f in fields[:2]] == ["principal", "producer_id"]


class CsvScreen:
    """Line batches in; folded sightings, dead letters and the header count out."""

    def __init__(self, line_schema: pa.Schema, max_principal: int):
        self.schema = pa.schema([*FOLDED, *as_binary(line_schema)])
        self.max_principal = max_principal

    def screen(self, batch: pa.RecordBatch):
        sources = sources_of(batch)
        events, letters, skipped = [], [], Counter()
        for i, value in enumerate(batch.column("value").to_pylist()):
            raw = (value or b"").decode("utf-8", errors="replace")
            text = raw.removeprefix("\ufeff").rstrip("\r")  # a byte order mark, a Windows line end
            if _is_header(text):
                skipped[HEADER] += 1
                continue
            try:
                events.append(sighting(text, self.max_principal))
            except BadRow as exc:
                letters.append(
                    json.dumps({"raw": raw, "reason": str(exc), "source": sources[i]}, ensure_ascii=False)
                )
        yield from screened_rows(events, ("client_id",), letters, skipped, self.schema)


class Csv:
    """Sightings as CSV (``pidquota.formats`` protocol): the screen judges every line."""

    entry = entry(NAME)
    reads = "lines"
    strict = None
    foreign = None

    def recognise(self, text: str) -> bool:
        text = text.removeprefix("\ufeff")
        if _is_header(text):
            return True
        try:
            fields = _fields(text)
            _integer(fields, 1), _integer(fields, 2)
        except BadRow:
            return False
        return True

    def options(self, config) -> dict[str, str]:
        return {"inputFormat": NAME}

    def said(self, config) -> str:
        return ""

    def screen(self, line_schema: pa.Schema, max_principal: int, options=None, broker_of=None) -> CsvScreen:
        return CsvScreen(line_schema, max_principal)


FORMAT = Csv()
