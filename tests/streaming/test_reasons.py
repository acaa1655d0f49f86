"""Every dead-letter reason the parser can give has its class (``streaming/reasons.py``).

The reasons are read out of ``formats/events_spark.py`` itself: each check there is a pair
``(condition, reason)`` whose reason is ``F.lit(...)`` or ``F.concat(...)`` of literals and
values. A value (a field name, a number, the text of a bad field) reads as ``x``. A reason
added to, or reworded in, the parser fails here until it is given its class.
"""

import ast
from pathlib import Path

import pytest

import pidquota.formats.events_spark as parse
from pidquota.streaming.reasons import REASON_CLASSES, reason_class


def _text(node: ast.expr) -> str:
    """A reason expression as text, every non-literal part as ``x``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(v) for v in node.values)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "lit" and node.args:
            return _text(node.args[0])
        if node.func.attr == "concat":
            return "".join(_text(a) for a in node.args)
    return "x"


def parser_reasons() -> list[str]:
    tree = ast.parse(Path(parse.__file__).read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and len(node.elts) == 2:
            why = node.elts[1]
            if (
                isinstance(why, ast.Call)
                and isinstance(why.func, ast.Attribute)
                and why.func.attr in ("lit", "concat")
            ):
                found.append(_text(why))
    return found


EXPECTED = {
    "empty record": "empty",
    "too many '{' or '[' (more than x): an event is one flat JSON object": "too_nested",
    "field 'x' is out of range: a number of more than 1000 digits": "out_of_range",
    "not valid JSON": "not_json",
    "not a JSON object": "not_object",
    "not valid JSON (text after the object)": "not_json",
    "missing required field 'x'": "missing_field",
    "field 'x' must be a string, got x": "wrong_type",
    "field 'x' must be an integer, got x": "wrong_type",
    "field 'x' is out of range (x): the number is too large": "out_of_range",
    "field 'x' is out of range (x): x": "out_of_range",
    "principal is empty (only white space or control characters)": "bad_principal",
    "principal is longer than x characters": "bad_principal",
}


def test_every_reason_in_the_parser_has_its_class():
    found = parser_reasons()
    assert {reason: reason_class(reason) for reason in found} == EXPECTED


@pytest.mark.parametrize(
    "reason, cls",
    [
        ("too many '{' or '[' (more than 64): an event is one flat JSON object", "too_nested"),
        ("field 'timestamp' is out of range: a number of more than 1000 digits", "out_of_range"),
        ("missing required field 'producer_id'", "missing_field"),
        ("field 'client_id' must be a string, got {\"a\":1}", "wrong_type"),
        ("field 'partition' must be an integer, got 1e2", "wrong_type"),
        ("field 'producer_id' must be an integer, got \"5\"", "wrong_type"),
        ("field 'producer_id' is out of range (int64): the number is too large", "out_of_range"),
        ("field 'producer_epoch' is out of range (-1..32767): 40000", "out_of_range"),
        ("principal is longer than 256 characters", "bad_principal"),
        ("", "other"),
        (None, "other"),
        ("Not valid JSON", "other"),  # the parser's texts, exactly
    ],
)
def test_reasons_with_their_values(reason, cls):
    assert reason_class(reason) == cls and cls in REASON_CLASSES
