"""JSON lines written row by row in compiled code (numba): the bytes of ``jsonl.py``'s Arrow
path, in one pass instead of a string array per column and a join of them all.

The Arrow path makes every column a string array of JSON values, then joins 2 × columns + 1
pieces per row (``binary_join_element_wise``): on a flood batch of a million 16-column
decisions, ~0.4 CPU-s for the values and ~0.8 for the join (330 MB of text). Here the columns
stay numbers and the kernel writes each row's bytes once: keys copied, integers and doubles
turned into digits in place, strings copied from a table of their distinct values, encoded by
pandas once (as the Arrow path does).

The columns reach the kernel as four stacks of one type each (integers as int64, doubles,
booleans, string codes), with each column's kind and row in its stack. A double is written by
``jsonl.py``'s rule (ujson's, ``double_precision=10``); one outside ``1e-15 <= |v| <= 1e16``
(rare) is given as a string, made in Python by ``%.10g`` as the Arrow path makes it. A null,
NaN or ±inf is ``null``.

Worked example, one row of ``{principal: "User:a", producer_id: 7, tokens: 2/3, replay:
False}``: the keys ``{"principal":``, ``,"producer_id":``, ``,"tokens":``, ``,"replay":``, then
``}\\n``, with ``"User:a"`` copied from the string table, ``7`` from its digits, ``0.6666666667``
(``w = 0``, ``f = 6666666667`` after rounding) and ``false``:
``{"principal":"User:a","producer_id":7,"tokens":0.6666666667,"replay":false}``.
``tests/streaming/outputs/test_jsonl.py`` checks both paths against pandas.
"""

from __future__ import annotations

import threading

import numpy as np

INT, DOUBLE, BOOL, STRING = 0, 1, 2, 3
# Bounds on a value's text: -9223372036854775808; a sign, at most 17 digits (|v| <= 1e16), the
# point and 10 decimals (outside the fixed range, %.10g: at most 17 characters)
INT_CHARS, DOUBLE_CHARS = 20, 29
_compiled = None
_tried = False
_lock = threading.Lock()  # one compile, and no thread told None while another compiles
# A process loads the compiled writer (numba's import and its machine code, ~0.6 CPU-s) once it
# has been asked for this many rows in all: a run that writes fewer (a test's, a trial's) writes
# them by Arrow, the same bytes, and never pays the load (quota/kernel.py's LOAD_AFTER likewise).
LOAD_AFTER = 20_000
_asked = 0


def _digits(out, at, u):
    """``u`` (uint64) in decimal at ``out[at:]``; returns the index after it."""
    if u == 0:
        out[at] = 48
        return at + 1
    n = 0
    v = u
    while v > 0:
        v //= np.uint64(10)
        n += 1
    end = at + n
    i = end - 1
    while u > 0:
        out[i] = 48 + np.uint8(u % np.uint64(10))
        u //= np.uint64(10)
        i -= 1
    return end


def _double(out, at, v):
    """``v``, finite and inside ujson's fixed range, as ``jsonl.doubles`` writes it."""
    if v < 0:
        out[at] = 45  # '-'
        at += 1
    a = abs(v)
    whole = np.uint64(a)
    scaled = (a - np.float64(whole)) * 1e10
    frac = np.uint64(scaled)
    diff = scaled - np.float64(frac)
    if diff > 0.5 or (diff == 0.5 and (frac == 0 or frac % np.uint64(2) == 1)):
        frac += np.uint64(1)
    if frac >= np.uint64(10_000_000_000):
        frac = np.uint64(0)
        whole += np.uint64(1)
    at = _digits(out, at, whole)
    out[at] = 46  # '.'
    at += 1
    if frac == 0:
        out[at] = 48
        return at + 1
    places = 10
    while frac % np.uint64(10) == 0:  # trailing zeros dropped
        frac //= np.uint64(10)
        places -= 1
    for i in range(places - 1, -1, -1):
        out[at + i] = 48 + np.uint8(frac % np.uint64(10))
        frac //= np.uint64(10)
    return at + places


def _copy(out, at, text, start, end):
    for i in range(start, end):
        out[at] = text[i]
        at += 1
    return at


def _rows(kinds, rows, keys, key_at, ints, dbls, dbl_text, bools, valid, codes, text, text_at, out):  # noqa: PLR0913
    """Every row as a JSON line into ``out`` (large enough); returns the bytes written.

    Column ``c`` is ``kinds[c]``'s stack row ``rows[c]``; its key is ``keys[key_at[c]:key_at[c+1]]``
    (the last key is ``}\\n``). ``valid[c]``: 0 for null. A double's ``dbl_text`` row holds -1, or the
    string index of its text (one outside the fixed range). A string's code indexes ``text_at``
    (-1: null)."""
    null = np.array([110, 117, 108, 108], np.uint8)
    true = np.array([116, 114, 117, 101], np.uint8)
    false = np.array([102, 97, 108, 115, 101], np.uint8)
    ncol = len(kinds)
    n = valid.shape[1]
    at = 0
    for r in range(n):
        for c in range(ncol):
            at = _copy(out, at, keys, key_at[c], key_at[c + 1])
            kind = kinds[c]
            row = rows[c]
            if valid[c, r] == 0:
                at = _copy(out, at, null, 0, 4)
            elif kind == 0:  # INT
                v = ints[row, r]
                if v < 0:
                    out[at] = 45
                    at = _digits(out, at + 1, np.uint64(-(v + 1)) + np.uint64(1))
                else:
                    at = _digits(out, at, np.uint64(v))
            elif kind == 1:  # DOUBLE
                s = dbl_text[row, r]
                if s >= 0:
                    at = _copy(out, at, text, text_at[s], text_at[s + 1])
                else:
                    at = _double(out, at, dbls[row, r])
            elif kind == 2:  # BOOL
                at = _copy(out, at, true, 0, 4) if bools[row, r] else _copy(out, at, false, 0, 5)
            else:  # STRING
                s = codes[row, r]
                at = _copy(out, at, text, text_at[s], text_at[s + 1])
        at = _copy(out, at, keys, key_at[ncol], key_at[ncol + 1])
    return at


def wanted(rows: int):
    """The compiled writer for a chunk of ``rows`` rows, or None for the Arrow path: once the
    writer is loaded, always it; before, only once this process has been asked for
    :data:`LOAD_AFTER` rows in all (counting these), and then it loads it (:func:`compiled`)."""
    global _asked
    if _tried:
        return _compiled
    _asked += rows
    return compiled() if _asked >= LOAD_AFTER else None


def compiled_here() -> bool:
    """Whether this installation already holds the writer's machine code (numba's index file
    beside this module): a process then loads it instead of compiling it (~1.3 CPU-s)."""
    from pathlib import Path

    return any((Path(__file__).parent / "__pycache__").glob("jsonl_kernel._rows-*.nbi"))


def compiled():
    """The compiled writer, or None where numba cannot give it (the Arrow path writes then).
    Cached beside this file (numba's ``cache=True``): ~1.3 CPU-s to compile once per
    installation, ~0.1 s to load in a process; checked on one row here, so a numba that
    cannot compile it is found before any batch."""
    global _compiled, _tried
    with _lock:
        if not _tried:
            _compiled = _compile()
            _tried = True
    return _compiled


def _compile():
    try:
        from numba import njit

        scope = globals()
        for name in ("_digits", "_double", "_copy"):
            scope[name] = njit(cache=True, no_cpython_wrapper=True, inline="always")(_py(scope[name]))
        writer = njit(cache=True, nogil=True)(_py(scope["_rows"]))
        _check(writer)
        return writer
    except Exception as exc:  # numba absent or failing: the Arrow path, the same bytes
        import warnings

        warnings.warn(
            f"pidquota: the compiled JSON writer is not available ({type(exc).__name__}: {exc}); "
            "the outputs are written by Arrow instead (the same bytes, slower)",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


def _py(f):
    return getattr(f, "py_func", f)


def _check(writer) -> None:
    keys = np.frombuffer(b'{"x":}\n', np.uint8)
    out = np.zeros(16, np.uint8)
    one = np.ones((1, 1), np.uint8)
    n = writer(np.zeros(1, np.int8), np.zeros(1, np.int32), keys, np.array([0, 5, 7]), np.full((1, 1), -7),
               np.zeros((0, 1)), np.zeros((0, 1), np.int32), np.zeros((0, 1), np.uint8), one,
               np.zeros((0, 1), np.int32), np.frombuffer(b"", np.uint8), np.zeros(1, np.int64), out)  # fmt: skip
    if bytes(out[:n]) != b'{"x":-7}\n':
        raise RuntimeError(f"the compiled JSON writer wrote {bytes(out[:n])!r}")
