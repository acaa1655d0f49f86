"""The file source's ledgers, damaged (issue 44): a CorruptStateError that names the file and
the fix, never another exception. They are pidquota's own files, but a disk, an editor or a
copy can damage them."""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness.hostile import FAST, as_bytes, deep, json_values
from hypothesis import given
from hypothesis import strategies as st

from pidquota.conf.errors import CorruptStateError
from pidquota.sources import follow, listing

GOOD_FILES = '{"path": "/in/a.jsonl", "mtime_ns": 1, "size": 2}'
GOOD_FOLLOW = '{"key": "k", "file": ["/in/a.log", 1, 2, 3, "h"]}'
_line = (
    st.sampled_from([GOOD_FILES, GOOD_FOLLOW])
    | deep()
    | json_values.map(str)
    | st.dictionaries(st.sampled_from(["path", "mtime_ns", "size", "key", "file"]), json_values).map(str)
    | st.text(max_size=30)
)


@FAST
@given(st.lists(_line, max_size=5), st.binary(max_size=4))
def test_a_damaged_ledger_is_a_clear_error(lines, junk):
    with tempfile.TemporaryDirectory() as tmp:
        raw = as_bytes("\n".join(lines)) + junk + b"\n"
        (Path(tmp) / listing.LEDGER).write_bytes(raw)
        (Path(tmp) / follow.LEDGER).write_bytes(raw)
        for read in (
            lambda: listing.read_ledger(Path(tmp) / listing.LEDGER),
            lambda: follow.Follower(tmp, Path(tmp) / follow.LEDGER),
        ):
            try:
                read()
            except CorruptStateError as exc:
                assert "--fresh" in str(exc)
