"""Following growing files (sources/follow.py), Spark-free: whole lines only, a
rolled file known as the same stream, a file cut shorter named and read again, a reused
inode told apart, quiet files parked and brought back, and chunks that replay exactly."""

import json
import logging
import os

import pytest

from pidquota.conf.errors import CorruptStateError
from pidquota.sources import follow


class Clock:
    def __init__(self, now=None):
        self.now = now

    def __call__(self):
        return self.now if self.now is not None else __import__("time").time()


@pytest.fixture
def logs(tmp_path):
    (tmp_path / "logs").mkdir()
    return tmp_path / "logs"


def follower(logs, clock=None):
    return follow.Follower(str(logs), logs.parent / "ck" / follow.LEDGER, clock or Clock())


def taken(chunks) -> dict[str, bytes]:
    """What a batch reads, per file path."""
    out = {}
    for c in chunks:
        path = follow.locate(c.key, c.path)
        with open(path, "rb") as f:
            f.seek(c.start)
            out[os.path.basename(path)] = out.get(os.path.basename(path), b"") + f.read(c.end - c.start)
    return out


def step(f, offset):
    end = f.advance(offset)
    return end, taken(f.chunks(offset, end))


def test_only_whole_lines_are_read_and_new_bytes_follow(logs):
    live = logs / "kafka-request.log"
    live.write_bytes(b"a\nb\npart")
    f = follower(logs)
    off, got = step(f, follow.initial())
    assert got == {"kafka-request.log": b"a\nb\n"}
    with live.open("ab") as w:
        w.write(b"ial\nc\n")
    off, got = step(f, off)
    assert got == {"kafka-request.log": b"partial\nc\n"}
    off, got = step(f, off)
    assert got == {}


def test_a_rolled_file_is_the_same_stream_and_the_new_live_file_is_read_from_its_start(logs):
    live = logs / "kafka-request.log"
    live.write_bytes(b"1\n2\n")
    f = follower(logs)
    off, got = step(f, follow.initial())
    with live.open("ab") as w:
        w.write(b"3\n")
    live.rename(logs / "kafka-request.log.2026-11-24-13")  # log4j rolls by renaming
    live.write_bytes(b"4\n")
    off, got = step(f, off)
    assert got == {"kafka-request.log.2026-11-24-13": b"3\n", "kafka-request.log": b"4\n"}
    assert len(off["follow"]) == 2


def test_a_file_cut_shorter_is_named_and_read_again_from_its_start(logs, caplog):
    live = logs / "app.log"
    live.write_bytes(b"one\ntwo\nthree\n")
    f = follower(logs)
    off, _ = step(f, follow.initial())
    with live.open("r+b") as w:
        w.truncate(0)
        w.write(b"new\n")
    with caplog.at_level(logging.WARNING, logger="pidquota.files"):
        off, got = step(f, off)
    assert got == {"app.log": b"new\n"}
    assert "app.log was cut shorter (4 bytes, 14 already read)" in caplog.text
    assert "copytruncate" in caplog.text


def test_an_inode_holding_another_file_is_read_from_its_start(logs):
    live = logs / "app.log"
    live.write_bytes(b"[2026-01-01 00:00:00,000] first\n")
    f = follower(logs)
    off, _ = step(f, follow.initial())
    live.write_bytes(
        b"[2026-01-02 00:00:00,000] other file, longer than the first\n"
    )  # same inode, new bytes
    off, got = step(f, off)
    assert got == {"app.log": b"[2026-01-02 00:00:00,000] other file, longer than the first\n"}


def test_a_last_line_without_a_newline_is_read_once_the_file_is_quiet(logs):
    live = logs / "app.log"
    live.write_bytes(b"a\nb")
    clock = Clock(live.stat().st_mtime + 1)
    f = follower(logs, clock)
    off, got = step(f, follow.initial())
    assert got == {"app.log": b"a\n"}
    clock.now += follow.QUIET_S
    off, got = step(f, off)
    assert got == {"app.log": b"b"}


def test_quiet_files_are_parked_and_come_back_where_they_stopped(logs):
    old = logs / "kafka-request.log.2026-11-24-13"
    old.write_bytes(b"x\n" * 5)
    os.utime(old, (1_000, 1_000))
    f = follower(logs)
    off1, got = step(f, follow.initial())  # read, not parked yet: it was not in the start offset
    assert got == {old.name: b"x\n" * 5} and off1["parked"] == 0
    off2, got = step(f, off1)
    assert got == {} and off2 == {"follow": {}, "parked": 1}
    assert json.loads((logs.parent / "ck" / follow.LEDGER).read_text())["file"][2] == 10
    with old.open("ab") as w:
        w.write(b"y\n")
    off3, got = step(f, off2)
    assert got == {old.name: b"y\n"}
    # A restart replays a batch from its offsets alone: the same bytes.
    again = follower(logs)
    assert taken(again.chunks(off2, off3)) == {old.name: b"y\n"}
    assert taken(again.chunks(off1, off2)) == {}


def test_a_replayed_batch_reads_the_same_bytes_after_a_roll(logs):
    live = logs / "kafka-request.log"
    live.write_bytes(b"1\n")
    f = follower(logs)
    off1, _ = step(f, follow.initial())
    live.write_bytes(b"1\n2\n")
    off2 = f.advance(off1)
    live.rename(logs / "kafka-request.log.1")  # rolled between planning and reading
    live.write_bytes(b"3\n")
    assert taken(follower(logs).chunks(off1, off2)) == {"kafka-request.log.1": b"2\n"}


def test_a_checkpoint_of_a_file_input_read_once_is_refused(logs):
    with pytest.raises(CorruptStateError, match="read once, not followed"):
        follower(logs).advance({"files": 3})


def test_a_followed_checkpoint_is_refused_by_a_file_input_read_once(tmp_path):
    from pidquota.sources.files import FileStreamReader

    (tmp_path / "in").mkdir()
    reader = FileStreamReader({"path": str(tmp_path / "in"), "ledger": str(tmp_path / "ck" / "l.jsonl")})
    with pytest.raises(CorruptStateError, match="followed files"):
        reader.latestOffset({"follow": {}, "parked": 0}, None)


def parked(logs, name: str):
    """A quiet file read to its end and parked (two triggers); its follower and offset."""
    old = logs / name
    old.write_bytes(b"x\n")
    os.utime(old, (1_000, 1_000))
    f, off = follower(logs), follow.initial()
    for _ in range(2):
        off, _ = step(f, off)
    return f, off


def test_a_parked_file_stays_parked_while_it_does_not_change(logs):
    f, off = parked(logs, "kafka-request.log.2026-11-24-12")
    assert off == {"follow": {}, "parked": 1}
    for _ in range(3):  # the offsets and the ledger no longer change: no empty batches
        again, got = step(f, off)
        assert again == off and got == {}
    assert len((logs.parent / "ck" / follow.LEDGER).read_text().splitlines()) == 1


def test_a_file_renamed_between_the_listing_and_the_read_is_not_read_again(logs, monkeypatch):
    live = logs / "kafka-request.log"
    live.write_bytes(b"1\n")
    f = follower(logs)
    off, _ = step(f, follow.initial())
    with live.open("ab") as w:
        w.write(b"2\n")
    listing = [str(live)]
    monkeypatch.setattr(f, "_listed", lambda: listing)  # the listing of before the roll
    live.rename(logs / "kafka-request.log.1")
    off, got = step(f, off)
    assert got == {"kafka-request.log.1": b"2\n"}
    monkeypatch.undo()
    live.write_bytes(b"3\n")
    off, got = step(f, off)
    assert got == {"kafka-request.log": b"3\n"}


def test_a_file_named_as_the_input_is_followed_through_its_rolls(logs):
    live = logs / "kafka-request.log"
    live.write_bytes(b"1\n")
    (logs / "other.log").write_bytes(b"no\n")
    f = follow.Follower(str(live), logs.parent / "ck" / follow.LEDGER)
    off, got = step(f, follow.initial())
    assert got == {"kafka-request.log": b"1\n"}
    with live.open("ab") as w:
        w.write(b"2\n")
    live.rename(logs / "kafka-request.log.2026-11-24-13")
    live.write_bytes(b"3\n")
    off, got = step(f, off)
    assert got == {"kafka-request.log.2026-11-24-13": b"2\n", "kafka-request.log": b"3\n"}


def test_a_lost_follow_ledger_is_named(logs):
    _, off = parked(logs, "r.log.1")
    (logs.parent / "ck" / follow.LEDGER).unlink()
    with pytest.raises(CorruptStateError, match="rely on 1 lines"):
        follower(logs).advance(off)


REQUEST_LINE = (
    b'[2026-11-24 13:00:00,123] DEBUG Completed request:{"requestHeader":{"requestApiKey":1}} '
    b"(kafka.request.logger)\n"
)
EVENT_LINE = b'{"timestamp": 1, "principal": "User:a", "producer_id": 7}\n'


@pytest.mark.parametrize(
    "name, body, named",
    [
        ("events.jsonl", EVENT_LINE * 3, "holds JSON events, not Kafka request-log lines"),
        ("old.log.gz", b"\x1f\x8b\x08\x00" + bytes(40), "is gzip-compressed"),
        ("core", b"\x00\x01\x02\n" * 4, "is not a text file"),
    ],
)
def test_a_new_file_the_format_cannot_read_is_named_once_and_not_followed(logs, caplog, name, body, named):
    """The request log is followed; a file of another kind arriving in its folder is named in
    one warning and never read, and the live log goes on."""
    live = logs / "kafka-request.log"
    live.write_bytes(REQUEST_LINE)
    f = follow.Follower(str(logs), logs.parent / "ck" / follow.LEDGER, Clock(), fmt="kafka-request-log")
    off, got = step(f, follow.initial())
    assert got == {"kafka-request.log": REQUEST_LINE}
    (logs / name).write_bytes(body)
    with live.open("ab") as w:
        w.write(REQUEST_LINE)
    with caplog.at_level(logging.WARNING, logger="pidquota.files"):
        off, got = step(f, off)
        off, again = step(f, off)
    assert got == {"kafka-request.log": REQUEST_LINE} and again == {}
    (warning,) = [r.getMessage() for r in caplog.records]
    assert named in warning and name in warning and "not followed" in warning


def test_a_new_file_is_judged_once_it_has_a_whole_line(logs):
    f = follow.Follower(str(logs), logs.parent / "ck" / follow.LEDGER, Clock(), fmt="events")
    new = logs / "events.jsonl"
    new.write_bytes(EVENT_LINE[:10])  # a line being written: not judged, nothing read
    off, got = step(f, follow.initial())
    assert got == {}
    with new.open("ab") as w:
        w.write(EVENT_LINE[10:])
    off, got = step(f, off)
    assert got == {"events.jsonl": EVENT_LINE}


def test_a_file_refused_after_its_first_line_is_whole_is_not_called_gone(logs, caplog):
    f = follow.Follower(str(logs), logs.parent / "ck" / follow.LEDGER, Clock(), fmt="events")
    new = logs / "kafka-request.log"
    new.write_bytes(REQUEST_LINE[:20])  # not judged yet
    off, _ = step(f, follow.initial())
    with new.open("ab") as w:
        w.write(REQUEST_LINE[20:])
    with caplog.at_level(logging.WARNING, logger="pidquota.files"):
        off, got = step(f, off)
    assert got == {}
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "holds Kafka request-log lines" in warning and "gone" not in warning
