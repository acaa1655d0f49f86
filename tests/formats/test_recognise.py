"""formats/recognise.py: a file input's files are looked at before Spark reads them, so
a wrong --input-format, a gzip file or a binary one is one line at start-up and nothing is
read (issue 35: a forgotten --input-format once made 134,607 dead letters, 143 MB)."""

from __future__ import annotations

import gzip
import json

import pytest

import pidquota.formats.recognise as sniff
from pidquota.cli.main import main
from pidquota.conf.errors import InputError
from pidquota.formats.recognise import HEAD, check_files, kind_of

EVENT = json.dumps({"timestamp": 1, "principal": "User:a", "producer_id": 7})
REQUEST = (
    '[2026-01-01 00:00:00,000] DEBUG Completed request:{"isForwarded":false,"requestHeader":'
    '{"requestApiKey":22,"requestApiVersion":5,"requestApiKeyName":"INIT_PRODUCER_ID"}} '
    "(kafka.request.logger)"
)
SHIPPED = json.dumps({"@timestamp": "2026-01-01T00:00:00Z", "message": REQUEST})


@pytest.mark.parametrize(
    "head, kind",
    [
        ((EVENT + "\n") * 5, "events"),
        ((REQUEST + "\n") * 5, "kafka-request-log"),
        ((SHIPPED + "\n") * 5, "kafka-request-log"),  # a log shipper's JSON around the line
        ((EVENT + "\nnot json\n") * 3 + EVENT, "events"),  # most lines decide
        ("a,b,c\n1,2,3\n", "text"),
        ("", "text"),
        (gzip.compress((EVENT + "\n").encode(), mtime=0), "gzip"),
        (b"\x00\x01\x02 parquet?", "binary"),
        (b"\xff\xfe not utf-8", "binary"),
    ],
)
def test_what_the_first_lines_say(head, kind):
    assert kind_of(head if isinstance(head, bytes) else head.encode()) == kind


def test_a_line_cut_at_the_end_of_the_head_does_not_count():
    head = ((REQUEST + "\n") * 200).encode()[:HEAD]
    assert kind_of(head) == "kafka-request-log"


def _files(tmp_path, **contents) -> list[str]:
    paths = []
    for name, data in contents.items():
        path = tmp_path / name.replace("_", ".")
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        paths.append(str(path))
    return paths


def test_request_log_lines_read_as_events_name_the_flag(tmp_path):
    paths = _files(tmp_path, events_jsonl=EVENT + "\n", kafka_request_log=(REQUEST + "\n") * 3)
    with pytest.raises(InputError) as caught:
        check_files(paths, "events")
    assert str(caught.value) == (
        f"{paths[1]} holds Kafka request-log lines, not JSON events: add --input-format kafka-request-log; "
        "nothing was read"
    )
    check_files(paths[1:], "kafka-request-log")  # the right flag reads it


def test_events_read_as_a_request_log_name_the_flag(tmp_path):
    paths = _files(tmp_path, a_jsonl=EVENT + "\n", b_jsonl=EVENT + "\n")
    with pytest.raises(
        InputError, match=r"holds JSON events, not Kafka request-log lines: drop --input-format "
    ):
        check_files(paths, "kafka-request-log")
    with pytest.raises(InputError, match=r"\(1 more file\(s\) like it\); nothing was read$"):
        check_files(paths, "kafka-request-log")


def test_a_gzip_or_binary_file_is_named_with_the_fix(tmp_path):
    [gz] = _files(tmp_path, events_jsonl_gz=gzip.compress((EVENT + "\n").encode(), mtime=0))
    with pytest.raises(
        InputError,
        match=rf"^{gz} is gzip-compressed, and pidquota reads plain-text lines: unpack it \(gunzip {gz}\)",
    ):
        check_files([gz], "events")
    [bin_] = _files(tmp_path, events_parquet=b"PAR1\x00\x00")
    with pytest.raises(InputError, match="is not a text file"):
        check_files([bin_], "kafka-request-log")


def test_other_text_and_the_log_audit_are_left_to_the_reader(tmp_path):
    paths = _files(tmp_path, notes_txt="hello\n", empty_jsonl="")
    check_files(paths, "events")
    check_files(_files(tmp_path, x_gz=b"\x1f\x8b"), "record-batches")  # no files there: Kafka input


def test_run_and_recommend_stop_before_spark_and_the_right_flag_goes_on(tmp_path, capsys, no_spark):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "kafka-request.log").write_text((REQUEST + "\n") * 3)
    out = tmp_path / "out"
    assert main(["run", "--input", str(logs), "--output", str(out), "--once"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"pidquota: error: {logs / 'kafka-request.log'} holds Kafka request-log lines, not JSON events: "
        "add --input-format kafka-request-log; nothing was read"
    ]
    assert not (out / "dead-letters").exists()
    assert main(["recommend", "--input", str(logs)]) == 2
    assert "add --input-format kafka-request-log" in capsys.readouterr().err
    ok = ["run", "--input", str(logs), "--output", str(out), "--once", "--input-format", "kafka-request-log"]
    assert main(ok) == 2 and "Spark would start here" in capsys.readouterr().err  # past every check


def test_a_few_bad_lines_among_events_are_the_screens_to_name_not_a_binary_file():
    head = (EVENT + "\n").encode() * 4 + b"\x00\x01 torn\n" + b"\xff not utf-8\n"
    assert kind_of(head) == "events"


# -- a running query's first records (FormatGuard) ----------------------------------------------

RL = '[2026-11-24 13:00:00,123] DEBUG Completed request:{"requestHeader":{"requestApiKey":1}} (kafka.request.logger)'


def test_the_guard_stops_request_log_records_read_as_events():
    guard = sniff.FormatGuard("events", "Kafka input 'kafka://b:9092/logs'")
    with pytest.raises(InputError) as err:
        guard.add([RL] * 30, records=30)
    assert str(err.value) == (
        "30 of the first 30 records of Kafka input 'kafka://b:9092/logs' hold Kafka request-log lines, not JSON "
        "events: add --input-format kafka-request-log; the run stops here, and this batch is not written"
    )


def test_the_guard_stops_a_request_log_run_that_finds_no_request_line():
    guard = sniff.FormatGuard("kafka-request-log", "Kafka input 'kafka://b:9092/events'")
    with pytest.raises(InputError, match="are not Kafka request-log lines: is --input-format right"):
        guard.add([], records=50, skipped={"not-a-request": 50}, events=0)


def test_the_guard_lets_a_few_bad_records_among_good_ones_through_and_stops_watching():
    guard = sniff.FormatGuard("events", "x")
    guard.add([RL] * 19, records=19)  # fewer than MIN_LINES so far
    guard.add(["{not json"] * 5, records=500)  # most records are good events
    guard.add([RL] * 100, records=600)  # past WATCH records: no longer watched
    assert not guard.watching
    mixed = sniff.FormatGuard("kafka-request-log", "x")
    mixed.add(
        [], records=100, skipped={"not-a-request": 90, "FETCH": 10}, events=0
    )  # a log among other lines
    assert not mixed.watching and not mixed.other


def test_a_large_first_batch_of_good_records_with_a_few_bad_ones_goes_on():
    """The count of bad records is set against every record seen, however large the batch."""
    guard = sniff.FormatGuard("events", "x")
    guard.add([RL] * 600, records=100_000)
    assert not guard.watching
    log = sniff.FormatGuard("kafka-request-log", "x")
    log.add([], records=30_000, skipped={"not-a-request": 300, "FETCH": 29_700}, events=0)  # no init yet
    assert not log.watching


def test_a_gzip_file_among_readable_ones_is_passed_over_not_a_stop(tmp_path):
    """A log folder rotated by logrotate holds .gz files: the source names each and reads the
    rest (FileStreamReader._readable); a folder of nothing else, or a file of the other
    format, still stops the run."""
    good = tmp_path / "events.jsonl"
    good.write_text('{"timestamp": 1, "principal": "User:a", "producer_id": 7}\n')
    old = tmp_path / "events.jsonl.1.gz"
    old.write_bytes(gzip.compress(good.read_bytes(), mtime=0))
    check_files([str(old), str(good)], "events")  # passes: one readable file
    with pytest.raises(InputError, match="gzip-compressed"):
        check_files([str(old)], "events")
    other = tmp_path / "kafka-request.log"
    other.write_text(RL + "\n")
    with pytest.raises(InputError, match="add --input-format kafka-request-log"):
        check_files([str(old), str(good), str(other)], "events")


DEEP = '{"principal": "User:a", "x": ' + "[" * 5000 + "]" * 5000 + "}"  # issue 44's poison pill


def test_a_line_nested_too_deep_to_parse_is_text_not_a_crash():
    assert sniff._line_kind(DEEP.encode()) == "text"
    assert kind_of(((EVENT + "\n") * 5 + DEEP + "\n").encode()) == "events"


def test_the_format_guard_passes_a_dead_letter_nested_too_deep():
    guard = sniff.FormatGuard("events", "in")
    guard.add([DEEP] * 30, 30)  # the screen dead-lettered it; the guard re-reads its text
    assert guard.seen == 30 and not guard.other


@pytest.mark.e2e
def test_issue_44_the_run_passes_a_poison_pill(tmp_path):
    """The issue's own trial: 200 good events with the hostile line among them, through
    ``pidquota run --once``: one dead letter, exit 0 (it was exit 2, for good)."""
    from harness.cli import run_cli

    good = [
        json.dumps({"timestamp": 1_767_225_600_000 + i, "principal": "User:a", "producer_id": i})
        for i in range(200)
    ]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "events.jsonl").write_text("\n".join([*good[:100], DEEP, *good[100:]]) + "\n")
    r = run_cli(
        "run", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--once", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr[-3000:]
    dead = [
        json.loads(x)
        for f in (tmp_path / "out" / "dead-letters").glob("*.jsonl")
        for x in f.read_text().splitlines()
    ]
    assert [d["reason"] for d in dead] == [
        "too many '{' or '[' (more than 64): an event is one flat JSON object"
    ]
    decided = [
        json.loads(x)
        for f in (tmp_path / "out" / "decisions").glob("*.jsonl")
        for x in f.read_text().splitlines()
    ]
    assert len(decided) == 200
