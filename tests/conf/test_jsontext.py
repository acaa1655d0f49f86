"""conf/jsontext.py: outside JSON read so that every failure is a ValueError that says what
is wrong (issue 44)."""

import pytest
from harness.hostile import FAST, as_bytes, deep, json_values
from hypothesis import given
from hypothesis import strategies as st

from pidquota.conf import jsontext


@pytest.mark.parametrize(
    "text, why",
    [
        ("[" * 5000 + "]" * 5000, "nested too deep"),
        ('{"a": ' + "9" * 5000 + "}", "a number too long to read"),
        (
            b'{"a": 1}\xff',
            "not UTF-8 text (byte 8",
        ),  # found by the new-user trial: it said 'a number too long'
        ('{"a": 1', "Expecting"),
    ],
)
def test_each_failure_says_what_is_wrong(text, why):
    with pytest.raises(ValueError, match=why.replace("(", r"\(")):
        jsontext.loads(text)


def test_brief_never_raises_and_cuts():
    assert jsontext.brief([[["x" * 100]]], 10) == '[[["xxxxxx'
    nested: list = []
    for _ in range(100_000):
        nested = [nested]
    assert "too deep" in jsontext.brief(nested)


@FAST
@given(deep().map(as_bytes) | st.binary(max_size=50) | json_values.map(lambda v: repr(v).encode()))
def test_loads_raises_nothing_but_value_error(raw):
    try:
        jsontext.loads(raw)
    except ValueError as exc:
        assert str(exc)
