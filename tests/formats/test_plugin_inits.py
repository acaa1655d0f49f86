"""The plug-in's init records (formats/plugin_inits.py): the screen alone, the synthetic PIDs, the
sniffer, and hostile records."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pidquota.formats.plugin_inits import (
    DENIED,
    FOREIGN,
    FORMAT,
    OTHER_VERSION,
    REFUSED,
    parse,
    synthetic_pid,
)
from pidquota.formats.recognise import fix, kind_of

LINES = pa.schema(
    [
        ("value", pa.binary()),
        ("kafka_topic", pa.string()),
        ("kafka_partition", pa.int32()),
        ("kafka_offset", pa.int64()),
    ]
)
T0 = 1_767_225_600_000


def record(seq=7, principal="User:a", outcome="granted", txn=None, run="c3a9", broker=1, **more) -> bytes:
    """A record as InitsPublisher.json writes it (key order and all)."""
    r = {
        "v": 1,
        "at_ms": T0 + seq,
        "broker": broker,
        "run": run,
        "seq": seq,
        "principal": principal,
        "client_id": "app-1",
        "client_address": "10.0.0.5",
        "listener": "PLAINTEXT",
        "transactional_id": txn,
        "outcome": outcome,
        "software": "apache-kafka-java 3.9.1",
    }
    if more.pop("seq_text", False):
        r["seq"] = str(seq)
    r.update(more)
    return json.dumps(r, separators=(",", ":")).encode()


def _screen(*values: bytes):
    n = len(values)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(list(values), pa.binary()),
            pa.array(["pidquota-plugin-inits"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
        ],
        schema=LINES,
    )
    out = list(FORMAT.screen(LINES, 256).screen(batch))
    assert all(b.schema.names == out[0].schema.names for b in out)
    folded = [r for b in out for r in b.to_pylist() if r["f_principal"]]
    judged = [json.loads(r["f_dead"]) for b in out for r in b.to_pylist() if r["f_dead"]]
    return (
        folded,
        [d for d in judged if "reason" in d],
        {k: n for d in judged for k, n in d.get("skipped", {}).items()},
    )


def test_the_worked_example():
    folded, dead, skipped = _screen(
        record(7), record(7), record(9, txn="tx"), record(8, outcome="refused"), b"hello"
    )
    (row,) = folded
    pids = row["f_producer_ids"]
    assert row["f_principal"] == "User:a" and len(pids) == 3 and pids[0] == pids[1] != pids[2]
    assert len(set(pids)) == 2  # the record sent twice is one PID
    assert row["f_timestamps"] == [T0 + 7, T0 + 7, T0 + 9] and row["f_max_ts"] == T0 + 9
    assert dead == [] and skipped == {REFUSED: 1, FOREIGN: 1}


def test_each_idempotent_init_is_a_new_pid_and_a_transactional_id_is_the_same_one_each_time():
    one = lambda **kw: parse(record(**kw), 256)[1]["producer_id"]  # noqa: E731
    assert len({one(seq=s) for s in range(1000)}) == 1000
    assert one(seq=1) != one(seq=1, run="other") != one(seq=1, broker=2)
    assert one(seq=1, txn="orders-0") == one(seq=99, txn="orders-0", broker=3, run="x")
    assert one(seq=1, txn="orders-0") != one(seq=1, txn="orders-1")
    assert all(0 <= one(seq=s) < 2**63 for s in range(100))
    # a function of what names the init alone (BLAKE2b, not Python's seeded hash): a replay, another
    # worker and the next version of pidquota give the same PID
    assert synthetic_pid({"transactional_id": "tx", "broker": 1, "run": "r", "seq": 0}) == 0x0E5368F1BF456022
    assert synthetic_pid({"transactional_id": None, "broker": 1, "run": "r", "seq": 0}) == 0x1EDDA190BBB3D19F


def test_the_clients_identity_is_kept():
    (row,), _, _ = _screen(record(1, txn="tx"))
    client = row["f_clients"][0].split("\x1f")
    assert client == ["app-1", "tx", "10.0.0.5", "apache-kafka-java 3.9.1", "1"]


def test_the_longest_record_the_plugin_writes_is_read():
    """Two ids of 32,767 control characters, each escaped to six bytes: ~393 kB, an init."""
    value = record(client_id="\x01" * 32_767, txn="\x02" * 32_767)
    assert len(value) > 390_000 and parse(value, 256)[0] == "granted"


def test_inits_that_granted_nothing_are_counted_not_sighted():
    folded, dead, skipped = _screen(
        record(1, outcome="refused"), record(2, outcome="denied"), record(3, outcome="denied")
    )
    assert folded == [] and dead == [] and skipped == {REFUSED: 1, DENIED: 2}


@pytest.mark.parametrize(
    "value, reason",
    [
        (record(outcome="maybe"), 'field outcome must be one of granted, refused, denied, got "maybe"'),
        (record(seq=-1), "field seq is out of range (0..9223372036854775807): -1"),
        (record(7, seq_text=True), 'field seq must be an integer, got "7"'),
        (record(at_ms=True), "field at_ms must be an integer, got true"),
        (record(principal=" "), "principal is empty (only white space or control characters)"),
        (record(principal="User:" + "x" * 300), "principal is longer than 256 characters"),
        (record(run=""), 'field run must be a text of 1 to 64 characters, got ""'),
        (record(client_id=5), "field client_id must be a text or null, got 5"),
        (b'{"v":1,"outcome":"granted"}', "missing field at_ms"),
        (record(txn="t" * 1_100_000), "a record of 1,100,"),
        (
            record(client_id="a\ud800b"),
            "field client_id holds a lone surrogate at character 1: not Unicode text",
        ),
        (record(principal="User:\udc00"), "field principal holds a lone surrogate at character 5"),
    ],
)
def test_a_broken_record_of_the_plugin_is_a_dead_letter_naming_its_field(value, reason):
    folded, dead, skipped = _screen(value)
    assert folded == [] and skipped == {}
    (letter,) = dead
    assert letter["reason"].startswith(reason) and letter["source"] == "pidquota-plugin-inits/0@0"


@pytest.mark.parametrize(
    "value, kind",
    [
        (b"", FOREIGN),
        (b"\x00\xff", FOREIGN),
        (b"[1,2]", FOREIGN),
        (b'{"principal":"User:a","producer_id":4}', FOREIGN),  # a JSON event: not the plug-in's
        (b'{"v":2,"seq":1}', OTHER_VERSION),
        (b'{"v":true}', FOREIGN),
        (b"{" * 5000, FOREIGN),
        (b"x" * 1_100_000, FOREIGN),
    ],
)
def test_a_record_of_any_other_shape_is_skipped_and_counted(value, kind):
    assert _screen(value) == ([], [], {kind: 1})


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(
            st.one_of(st.binary(max_size=80), st.builds(record, seq=st.integers(0, 2**40))),
            min_size=1,
            max_size=4,
        ),
        max_size=10,
    )
)
def test_every_line_of_every_record_is_accounted_for_and_none_raises(records):
    values = [b"\n".join(lines) for lines in records]
    expected = sum(max(1, sum(1 for line in v.split(b"\n") if line.strip())) for v in values)
    folded, dead, skipped = _screen(*values)
    assert sum(len(r["f_producer_ids"]) for r in folded) + len(dead) + sum(skipped.values()) == expected


def test_a_record_of_several_lines_is_an_init_a_line():
    """The plug-in gathers a principal's inits of 50 ms into one record, a line each."""
    folded, dead, skipped = _screen(
        record(1) + b"\n" + record(2, outcome="refused") + b"\n" + record(3, seq_text=True), record(4)
    )
    (row,) = folded
    assert len(row["f_producer_ids"]) == 2 and skipped == {REFUSED: 1}
    (letter,) = dead
    assert (
        letter["source"] == "pidquota-plugin-inits/0@0" and letter["raw"] == record(3, seq_text=True).decode()
    )


def test_the_sniffer_knows_a_plugin_record_from_a_json_event():
    assert FORMAT.recognise(record().decode()) and kind_of(record() + b"\n" + record(8)) == "plugin-inits"
    assert kind_of(b'{"principal":"User:a","producer_id":4,"timestamp":1}\n') == "events"
    assert fix("events", "plugin-inits") == (
        "holds plug-in init records, not JSON events: add --input-format plugin-inits"
    )
