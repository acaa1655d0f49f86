"""Hostile owners files and startingOffsets values (issue 44): a clear error, never another
exception."""

import json

from harness.hostile import FAST, NUMBERS, as_bytes, deep, json_values, written
from hypothesis import given
from hypothesis import strategies as st

from pidquota.conf.errors import PidquotaError
from pidquota.store.kafka import parse_starting_offsets
from pidquota.store.owners import Owners

_doc = (
    json_values.map(lambda v: json.dumps({"topics": v}, allow_nan=True))
    | json_values.map(lambda v: json.dumps(v, allow_nan=True))
    | deep()
    | st.dictionaries(st.text(max_size=8), json_values, max_size=3).map(lambda d: json.dumps({"topics": d}))
)


@FAST
@given(_doc, st.binary(max_size=6))
def test_no_owners_file_raises_anything_but_a_clear_error(text, junk):
    with written(as_bytes(text) + junk) as name:
        try:
            owners = Owners.from_file(name)
        except PidquotaError as exc:
            assert "pidquota.audit.owners" in str(exc) and name in str(exc)
        else:
            assert owners.of("orders").startswith(("User:", "Topic:")) or owners.of("orders")


@FAST
@given(
    st.sampled_from(NUMBERS)
    | deep()
    | json_values.map(lambda v: json.dumps(v, allow_nan=True))
    | st.dictionaries(st.text(max_size=5), json_values, max_size=3).map(json.dumps)
    | st.text(max_size=20)
)
def test_no_starting_offsets_raise_anything_but_a_clear_error(text):
    try:
        parse_starting_offsets(text)
    except PidquotaError as exc:
        assert "startingOffsets" in str(exc) or "offset" in str(exc)
