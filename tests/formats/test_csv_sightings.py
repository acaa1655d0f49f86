"""CSV sightings (formats/csv_sightings.py): the screen alone, the sniffer, and a run that
decides exactly as the same sightings written as JSON events."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from pidquota.conf.errors import InputError
from pidquota.formats.csv_sightings import FORMAT, HEADER, sighting
from pidquota.formats.recognise import check_files, kind_of

LINES = pa.schema([("value", pa.binary()), ("source_file", pa.string())])
T0 = 1_767_225_600_000


def _screen(*lines: str):
    batch = pa.RecordBatch.from_arrays(
        [pa.array([s.encode() for s in lines], pa.binary()), pa.array(["file:///in.csv"] * len(lines))],
        schema=LINES,
    )
    out = list(FORMAT.screen(LINES, 256).screen(batch))
    folded = [r for b in out for r in b.to_pylist() if r["f_principal"]]
    judged = [json.loads(r["f_dead"]) for b in out for r in b.to_pylist() if r["f_dead"]]
    return (
        folded,
        [d for d in judged if "reason" in d],
        {k: n for d in judged for k, n in d.get("skipped", {}).items()},
    )


def test_the_worked_example():
    folded, dead, skipped = _screen(
        "principal,producer_id,timestamp", "User:a,7,1000", "User:a,8,1500,0,app", "User:a,x,1"
    )
    (row,) = folded
    assert (row["f_principal"], row["f_producer_ids"], row["f_timestamps"], row["f_epochs"]) == (
        "User:a",
        [7, 8],
        [1000, 1500],
        [-1, 0],
    )
    assert row["f_client_pids"] == [8] and row["f_clients"][0].startswith("app\x1f")
    assert [(d["raw"], d["reason"], d["source"]) for d in dead] == [
        ("User:a,x,1", "field 'producer_id' must be an integer, got 'x'", "file:///in.csv")
    ]
    assert skipped == {HEADER: 1}


def test_a_quoted_principal_keeps_its_commas():
    assert (
        sighting('"User:CN=bob,OU=eng,O=corp",4001,1764000000250', 256)["principal"]
        == "User:CN=bob,OU=eng,O=corp"
    )


@pytest.mark.parametrize(
    "line, reason",
    [
        ("User:a,7", "2 field(s); expected 3 to 5"),
        ("User:a,7,1,0,app,extra", "6 field(s); expected 3 to 5"),
        ('"User:a,7,1', "not a CSV line"),
        ("User:a,7,1.5", "field 'timestamp' must be an integer, got '1.5'"),
        ("User:a,7,-1", "field 'timestamp' is out of range (0..253402300799999): -1"),
        ("User:a,7,99999999999999999", "field 'timestamp' is out of range"),
        ("User:a,9" + "9" * 30 + ",1", "field 'producer_id' is out of range"),
        ("User:a,7,1,40000", "field 'producer_epoch' is out of range (-1..32767)"),
        ("User:a,٧,1", "field 'producer_id' must be an integer"),  # an Arabic-Indic seven
        (" ,7,1", "principal is empty"),
        ("", "empty record"),
        ("User:a," + "7" * 70_000 + ",1", "a line of 70,009 characters, longer than a sighting can be"),
        ("User:a,x,y,z", "field 'producer_id' must be an integer, got 'x'"),  # the first field's reason
        ("x" * 300 + ",7,1", "principal is longer than 256 characters"),
    ],
)
def test_a_bad_line_is_a_dead_letter_with_its_reason(line, reason):
    folded, dead, _ = _screen(line, "User:ok,1,1")
    assert [r["f_principal"] for r in folded] == ["User:ok"]
    assert len(dead) == 1 and dead[0]["reason"].startswith(reason) and dead[0]["raw"] == line


@pytest.mark.parametrize(
    "header",
    [
        "principal,producer_id,timestamp",
        '"principal","producer_id","timestamp"',
        "\ufeffprincipal,producer_id",
    ],
)
def test_a_header_quoted_or_after_a_byte_order_mark_is_counted_not_a_dead_letter(header):
    folded, dead, skipped = _screen(header, "User:a,7,1000")
    assert len(folded) == 1 and not dead and skipped == {HEADER: 1}
    assert FORMAT.recognise(header.strip())


def test_a_negative_pid_is_a_sighting_the_quota_ignores():
    assert sighting("User:a,-1,5", 256)["producer_id"] == -1


def test_the_sniffer_names_a_csv_file_read_as_events(tmp_path):
    path = tmp_path / "pids.csv"
    path.write_text(
        "principal,producer_id,timestamp\n" + "".join(f"User:a,{i},{T0 + i}\n" for i in range(10))
    )
    assert kind_of(path.read_bytes()) == "csv"
    with pytest.raises(
        InputError, match=r"pids.csv holds CSV sightings, not JSON events: add --input-format csv"
    ):
        check_files([str(path)], "events")
    check_files([str(path)], "csv")


def _sightings():
    """(time, principal, PID, epoch, client): a crash loop, a steady producer re-initing its
    PID with a higher epoch, and a TLS principal with commas in it."""
    out = [(T0 + i * 2_000, "User:crash", 10_000 + i, 0, f"loop-{i % 3}") for i in range(60)]
    out += [(T0 + i * 30_000, "User:steady", 7, i, "app") for i in range(4)]
    out += [(T0 + 5_000 + i * 40_000, "User:CN=tls,O=corp", 8 + i, 0, None) for i in range(3)]
    return sorted(out, key=lambda s: s[0])


def _decided(frame):
    cols = ["principal", "producer_id", "producer_epoch", "timestamp", "verdict", "client_id"]
    return sorted(map(tuple, frame[cols].astype(str).itertuples(index=False)))


def test_a_csv_file_decides_as_the_json_events_of_its_sightings(make_enforcer, tmp_path):
    quotas = {"User:crash": 20, "<default>": 1000}
    events = [
        {
            "timestamp": t,
            "principal": u,
            "producer_id": p,
            "producer_epoch": e,
            **({"client_id": c} if c else {}),
        }
        for t, u, p, e, c in _sightings()
    ]
    expected = make_enforcer(tmp_path / "events", quotas).run(events)
    assert (expected["decisions"]["verdict"] == "THROTTLE").any()  # the crash loop is throttled

    runner = make_enforcer(tmp_path / "csv", quotas, **{"pidquota.input.format": "csv"})
    rows = [
        f"{u if ',' not in u else chr(34) + u + chr(34)},{p},{t},{e},{c or ''}"
        for t, u, p, e, c in _sightings()
    ]
    (runner.input / "pids.csv").write_text(
        "principal,producer_id,timestamp,producer_epoch,client_id\n"
        + "\n".join(rows)
        + "\nUser:crash,oops,1\n"
    )
    got = runner._run(runner._files(0))

    assert _decided(got["decisions"]) == _decided(expected["decisions"])
    assert list(got["dead-letters"]["reason"]) == ["field 'producer_id' must be an integer, got 'oops'"]
    assert dict(zip(got["skipped"]["what"], got["skipped"]["count"], strict=True)) == {HEADER: 1}
