"""JSON from outside pidquota, read so that no input can raise anything but ``ValueError``.

Python's ``json.loads`` raises ``ValueError`` (``JSONDecodeError``, or a number of more
than 4,300 digits) for most bad text, but ``RecursionError`` for nesting deeper than the
interpreter's stack allows; how deep that is depends on how deep the caller already is (a
Spark worker's pandas UDF sits far lower than a test). Issue 44: one event holding an
array nested 5,000 deep stopped a query for good, because one reader caught ``ValueError``
alone. Every reader of outside JSON (input lines, shipper envelopes, the actuator's
journal, the quotas, owners and mix files) goes through :func:`loads`, and quotes a value
back with :func:`brief`, whose ``json.dumps`` of a deep value can fail the same way.

Worked example: ``loads('[' * 5000 + ']' * 5000)`` raises :class:`TooDeep` (a
``ValueError``) saying "nested too deep to read (over ~1,000 levels)"; ``loads('{"a": 1}')``
is ``{'a': 1}``; ``brief([[["x" * 100]]], 10)`` is ``'[[["xxxxxx'``.
"""

from __future__ import annotations

import json


class TooDeep(ValueError):
    """JSON nested deeper than Python's stack lets ``json`` read or write."""

    def __init__(self) -> None:
        super().__init__("nested too deep to read (over ~1,000 levels of '[' or '{')")


class NumberTooLong(ValueError):
    """A JSON integer of more digits than Python converts (``sys.get_int_max_str_digits``)."""

    def __init__(self) -> None:
        super().__init__("a number too long to read (over 4,300 digits)")


def loads(text: str | bytes | bytearray):
    """``json.loads(text)``, where every failure is a ``ValueError``: ``JSONDecodeError``
    (with ``msg`` and ``pos``), :class:`TooDeep`, :class:`NumberTooLong`, or for bytes that
    are not UTF-8 a ``ValueError`` that says so."""
    try:
        return json.loads(text)
    except RecursionError:
        raise TooDeep() from None
    except json.JSONDecodeError:
        raise
    except UnicodeDecodeError as exc:  # bytes: json decodes them as UTF-8 (or -16, -32) first
        raise ValueError(not_utf8(exc)) from None
    except ValueError:  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
        raise NumberTooLong() from None


def not_utf8(exc: UnicodeDecodeError) -> str:
    """What a ``UnicodeDecodeError`` says, the way every reader of outside bytes says it."""
    return f"not UTF-8 text (byte {exc.start}: {exc.object[exc.start : exc.start + 4]!r})"


def brief(value, n: int = 40) -> str:
    """``value`` as JSON, cut to ``n`` characters, for a message: never raises (a value too
    deep or too odd to write is named by its type)."""
    try:
        text = json.dumps(value)
    except (RecursionError, ValueError, TypeError):
        text = f"<a {type(value).__name__} too deep to show>"
    return text[:n]
