"""Several principals' state in one blob (quota/states.py)."""

import pytest

from pidquota.conf.errors import CorruptStateError
from pidquota.quota.states import PrincipalStates


def test_round_trip_keeps_every_principal_timer_and_blob():
    s = PrincipalStates()
    s.put("User:a", b"\x00\x01", 100)
    s.put("User:é", b"", 250)
    s.put("", b"x" * 70_000, 7)
    s.put("User:" + "\u4e2d" * 30_000, b"y", 9)  # a name of 90 KB in UTF-8
    back = PrincipalStates.from_bytes(s.to_bytes())
    assert back.entries == s.entries
    assert back.next_timer_ms() == 7


def test_due_is_timer_before_the_watermark_and_skips_principals_with_events():
    s = PrincipalStates({"a": (100, b"1"), "b": (250, b"2"), "c": (119, b"3")})
    assert sorted(s.due(120, skip=set())) == ["a", "c"]
    assert s.due(120, skip={"a"}) == ["c"]
    assert s.due(100, skip=set()) == []  # Spark's rule: a timer times out once the watermark is past it
    s.set_timer("a", 400)
    assert s.get("a") == b"1" and s.next_timer_ms() == 119


@pytest.mark.parametrize(
    "blob", [b"", b"PQS\x02\x00\x00\x00\x00", b"PQS\x01\x01\x00\x00\x00\x05\x00\x00\x00ab", b"not ours"]
)
def test_a_blob_that_is_not_ours_says_so(blob):
    with pytest.raises(CorruptStateError, match="new checkpoint"):
        PrincipalStates.from_bytes(blob)


def test_trailing_bytes_are_refused():
    blob = PrincipalStates({"a": (1, b"x")}).to_bytes() + b"!"
    with pytest.raises(CorruptStateError, match="left over"):
        PrincipalStates.from_bytes(blob)
