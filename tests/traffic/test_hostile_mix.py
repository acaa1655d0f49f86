"""Hostile traffic mix files (issue 44): a clear error or a mix, never another exception."""

import json

from harness.hostile import FAST, as_bytes, deep, json_values, written
from hypothesis import given
from hypothesis import strategies as st

from pidquota.conf.errors import PidquotaError
from pidquota.traffic.mixes import load_mix

_doc = (
    json_values.map(lambda v: json.dumps(v, allow_nan=True))
    | deep()
    | st.dictionaries(st.text(max_size=8), json_values, max_size=3).map(
        lambda d: json.dumps(d, allow_nan=True)
    )
)


@FAST
@given(_doc, st.binary(max_size=6))
def test_no_mix_file_raises_anything_but_a_clear_error(text, junk):
    with written(as_bytes(text) + junk) as name:
        try:
            load_mix(name)
        except PidquotaError as exc:
            assert str(exc)
