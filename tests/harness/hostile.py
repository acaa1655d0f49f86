"""Hostile input for property-based tests (Hypothesis) of every reader of outside bytes
(issue 44): deep nesting, balanced and not; huge lines and numbers, NaN and infinities; NUL
bytes and invalid UTF-8; truncated records; wrong types in every field.

The rule each reader's test checks: a dead letter with a reason, a warning, or a clear
error (``PidquotaError``), never another exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Readers are fast and pure: many examples, no deadline (a 30 MB line takes its time). Derandomized:
# the same examples every run, so CI never fails one day in ten on a case it drew that day (a new
# search: HYPOTHESIS_RANDOM=1, which draws afresh; a failure found so becomes a fixed example).
_RANDOM = os.environ.get("HYPOTHESIS_RANDOM") == "1"
FAST = settings(
    max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=not _RANDOM
)
# Readers that start a Spark job per example.
SLOW = settings(
    max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=not _RANDOM
)
# A property whose examples each draw SLOW.max_examples inputs and judge them in one Spark job.
# Two: Hypothesis' first example is its simplest, the second is drawn.
FEW_JOBS = settings(SLOW, max_examples=2)

NUMBERS = [
    "NaN",
    "-NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e400",
    "1e-400",
    "9" * 5000,
    "-" + "9" * 400,
    "0.5",
]
NUMBERS += ["1" + "0" * 19, "-1", "00", "1.", ".5", "0x10"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def deep(draw) -> str:
    """Nesting of '[' or '{"a":', balanced or not, from 900 (near Python's limit) to 100,000 deep."""
    depth = draw(st.sampled_from([900, 990, 1000, 1001, 5000, 100_000]))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
    closing = closer * depth if draw(st.booleans()) else closer * draw(st.integers(0, depth - 1))
    return opener * depth + ("1" if opener != "[" else "") + closing


def _with(record: dict, field: str, literal: str) -> str:
    """``record`` as JSON with ``field``'s value written as the raw ``literal``."""
    body = json.dumps({**record, field: "\x00MARK"})
    return body.replace(json.dumps("\x00MARK"), literal)


@st.composite
def hostile_text(
    draw, good: list[str], fields: list[str], huge=(100_000, 1_000_000, 30_000_000)
) -> str | bytes:
    """One hostile line made from the ``good`` lines' shape and ``fields`` names; a huge line
    has one of the ``huge`` sizes."""
    base = draw(st.sampled_from(good))
    try:
        record = json.loads(base)
    except ValueError:
        record = None
    kind = draw(st.integers(0, 9))
    if kind == 0 or not isinstance(record, dict):
        return draw(deep())
    field = draw(st.sampled_from(fields))
    if kind == 1:  # nesting inside a good record, as issue 44 found it
        return _with(record, field, draw(deep()))
    if kind == 2:  # huge numbers, NaN and infinities where any field is
        return _with(record, field, draw(st.sampled_from(NUMBERS)))
    if kind == 3:  # a wrong type in a field
        return _with(record, field, json.dumps(draw(json_values), allow_nan=True))
    if kind == 4:  # truncated
        return base[: draw(st.integers(0, max(0, len(base) - 1)))]
    if kind == 5:  # a NUL or another control character in the middle
        at = draw(st.integers(0, len(base)))
        return base[:at] + draw(st.sampled_from(["\x00", "\x01", "\x1f", "\x7f", "\u2028"])) + base[at:]
    if kind == 6:  # bytes that are not UTF-8
        raw = base.encode()
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xfe\xff"])) + raw[at:]
    if kind == 7:  # a huge line
        size = draw(st.sampled_from(huge))
        return _with(record, field, json.dumps("x" * size))
    if kind == 8:  # arbitrary bytes without a line break
        return draw(st.binary(max_size=300)).replace(b"\n", b" ").replace(b"\r", b" ")
    return json.dumps(draw(json_values), allow_nan=True)  # any JSON value at all


def as_bytes(line: str | bytes) -> bytes:
    return line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")


def as_text(line: str | bytes) -> str:
    return line if isinstance(line, str) else line.decode("utf-8", "replace")


@contextlib.contextmanager
def written(raw: bytes, suffix: str = ".json"):
    """A temporary file holding ``raw``: its path, for a reader of files."""
    with tempfile.NamedTemporaryFile("wb", suffix=suffix) as f:
        f.write(raw)
        f.flush()
        yield f.name
