"""Hostile quota files (issue 44): a clear error or quotas, never another exception."""

import json
import tempfile

from harness.hostile import FAST, NUMBERS, as_bytes, deep, json_values
from hypothesis import given
from hypothesis import strategies as st

from pidquota.conf.errors import PidquotaError
from pidquota.quota import StaticQuotas, parse_quotas

_entity = st.sampled_from(["<default>", "User:a", "", "User:*", "x" * 10_000, "\x00"]) | st.text(max_size=10)
_rate = st.sampled_from(NUMBERS).map(lambda n: f'{{"producer_ids_rate": {n}}}') | json_values.map(
    lambda v: json.dumps({"producer_ids_rate": v}, allow_nan=True)
)
_doc = (
    st.dictionaries(_entity, _rate, max_size=4).map(
        lambda d: "{" + ",".join(f"{json.dumps(k)}: {v}" for k, v in d.items()) + "}"
    )
    | deep()
    | json_values.map(lambda v: json.dumps(v, allow_nan=True))
)


@FAST
@given(_doc, st.binary(max_size=6), st.booleans())
def test_no_quota_file_raises_anything_but_a_clear_error(text, junk, cut):
    raw = as_bytes(text) + junk
    with tempfile.NamedTemporaryFile("wb", suffix=".json") as f:
        f.write(raw[: len(raw) // 2] if cut else raw)
        f.flush()
        try:
            quotas = StaticQuotas.from_file(f.name)
        except PidquotaError as exc:
            assert f.name in str(exc)
        else:
            assert all(isinstance(r, float) for r in quotas.snapshot().values())


@FAST
@given(json_values)
def test_no_parsed_document_raises_anything_but_a_clear_error(doc):
    try:
        quotas = parse_quotas(doc, origin="test")
    except PidquotaError as exc:
        assert "test" in str(exc) or str(exc)
    else:
        assert isinstance(quotas, dict)
