"""Dead-letter reasons in a few classes, for Prometheus labels and the report.

The parser's reason texts name the field and the value (``formats/events_spark.py``);
a label must not, or one bad producer makes a series per value.
"""

from __future__ import annotations

import re

REASON_CLASSES = (
    "empty",
    "too_nested",
    "not_json",
    "not_object",
    "missing_field",
    "wrong_type",
    "out_of_range",
    "bad_principal",
    "other",
)

_PATTERNS = (
    ("empty", re.compile(r"^empty record")),
    ("too_nested", re.compile(r"^too many '")),
    ("not_object", re.compile(r"^not a JSON object")),
    ("not_json", re.compile(r"^not valid JSON")),
    ("missing_field", re.compile(r"^missing required field ")),
    ("wrong_type", re.compile(r"^field '[^']*' must be ")),
    ("out_of_range", re.compile(r"^field '[^']*' is out of range")),
    ("bad_principal", re.compile(r"^principal ")),
)


def reason_class(reason: str | None) -> str:
    """The class of a dead letter's reason, one of :data:`REASON_CLASSES`."""
    for name, pattern in _PATTERNS:
        if reason and pattern.match(reason):
            return name
    return "other"
