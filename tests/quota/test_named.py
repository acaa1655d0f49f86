"""quota/named.py: the layout shared by a group's state and an eviction slot."""

import struct

import pytest

from pidquota.conf.errors import CorruptStateError
from pidquota.quota.named import pack_named, unpack_named

TIMER = struct.Struct("<q")


def read_timer(buf, at):
    return TIMER.unpack_from(buf, at)[0], at + TIMER.size


def test_the_docstring_s_example_byte_for_byte():
    buf = pack_named(b"PQW", 1, {"User:a": 7}, lambda t: [TIMER.pack(t)])
    assert buf == b"PQW\x01" + (1).to_bytes(4, "little") + (6).to_bytes(4, "little") + b"User:a" + TIMER.pack(
        7
    )
    assert len(buf) == 26
    assert unpack_named(buf, b"PQW", 1, read_timer, "a slot") == {"User:a": 7}


def test_another_magic_version_or_trailing_bytes_are_refused_naming_what_it_was():
    buf = pack_named(b"PQW", 1, {"User:é": -1}, lambda t: [TIMER.pack(t)])
    for bad, why in (
        (b"PQS" + buf[3:], "header"),
        (buf[:3] + b"\x02" + buf[4:], "header"),
        (buf + b"x", "left over"),
    ):
        with pytest.raises(
            CorruptStateError, match=rf"^a slot in the checkpoint is not pidquota's \(.*{why}"
        ):
            unpack_named(bad, b"PQW", 1, read_timer, "a slot")
    with pytest.raises(CorruptStateError, match="a slot"):
        unpack_named(buf[:-2], b"PQW", 1, read_timer, "a slot")  # cut short
