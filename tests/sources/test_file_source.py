"""pidquota's file source without Spark: listing order, skipped names, the ledger, line splitting."""

import os

import pytest

from pidquota.sources import files as fs
from pidquota.sources import listing as ls


def _touch(path, text="x\n", mtime_ns=1_700_000_000_000_000_000):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_files_with_equal_mtimes_are_taken_by_path_and_older_files_first(tmp_path):
    for name in ["b.jsonl", "a.jsonl", "sub/c.jsonl", "c.jsonl"]:
        _touch(tmp_path / name)
    _touch(tmp_path / "z-old.jsonl", mtime_ns=1)
    listing = ls.scan(tmp_path)
    names = [os.path.relpath(f.path, tmp_path) for f in listing.files]
    assert names == ["z-old.jsonl", "a.jsonl", "b.jsonl", "c.jsonl", "sub/c.jsonl"]
    assert ls.scan(tmp_path).files == listing.files  # the same every time


def test_hidden_names_are_skipped_in_a_folder_and_named_but_read_when_named(tmp_path):
    for name in ["ok.jsonl", "_SUCCESS", ".part.tmp", "_staging/x.jsonl", ".git/y"]:
        _touch(tmp_path / name)
    listing = ls.scan(tmp_path)
    assert [os.path.basename(f.path) for f in listing.files] == ["ok.jsonl"]
    # dot names are hidden by convention: passed over without a word
    assert sorted(os.path.basename(s.rstrip(os.sep)) for s in listing.skipped) == ["_SUCCESS", "_staging"]
    assert len(ls.scan(tmp_path / "_SUCCESS").files) == 1


def test_start_up_notes_name_skipped_and_changed_files_and_an_empty_folder(tmp_path):
    folder, ck = tmp_path / "in", tmp_path / "ck"
    _touch(folder / "a.jsonl")
    _touch(folder / "_b.jsonl")
    reader = fs.FileStreamReader({"path": str(folder), "ledger": str(ck / ls.LEDGER)})
    assert reader.latestOffset({"files": 0}, None) == {"files": 1}
    _touch(folder / "a.jsonl", text="x\ny\n")  # rewritten after it was read
    notes, resumed = ls.start_up_notes(folder, ck)
    assert resumed and len(notes) == 2
    assert "_b.jsonl" in notes[0] and "a.jsonl" in notes[1] and "not read again" in notes[1]
    (tmp_path / "empty").mkdir()
    notes, resumed = ls.start_up_notes(tmp_path / "empty", tmp_path / "ck2")
    assert notes == [f"warning: {tmp_path / 'empty'} has no files to read"] and not resumed
    with pytest.raises(ls.InputError, match="does not exist"):
        ls.start_up_notes(tmp_path / "missing", ck)


def test_an_empty_file_is_taken_once_it_has_bytes(tmp_path, caplog):
    folder, ledger = tmp_path / "in", tmp_path / "ck" / ls.LEDGER
    _touch(folder / "b.jsonl", text="", mtime_ns=1_700_000_000_000_000_001)  # created, not yet written
    assert ls.start_up_notes(folder, tmp_path / "ck")[0] == [
        f"warning: {folder} has only empty files so far; each is read once it has bytes"
    ]
    _touch(folder / "a.jsonl")
    reader = fs.FileStreamReader({"path": str(folder), "ledger": str(ledger)})
    _touch(folder / "c.jsonl.tmp")  # a writer's file, renamed when complete: no warning
    _touch(folder / "_d.jsonl")  # a hidden name appearing while the query runs: a warning
    assert reader.latestOffset({"files": 0}, None) == {"files": 1}
    assert [r.getMessage() for r in caplog.records if r.name == "pidquota.files"] == [
        f"pidquota: not reading {folder / '_d.jsonl'} (hidden name, or changed after it was read)"
    ]
    _touch(folder / "b.jsonl", text="y\n", mtime_ns=1_700_000_000_000_000_002)
    assert reader.latestOffset({"files": 1}, None) == {"files": 2}
    assert [os.path.basename(e.path) for e in ls.read_ledger(ledger)] == ["a.jsonl", "b.jsonl"]
    assert ls.read_ledger(ledger)[1].size == 2


def test_offsets_are_ledger_positions_and_survive_a_restart_and_a_torn_line(tmp_path):
    folder, ledger = tmp_path / "in", tmp_path / "ck" / ls.LEDGER
    for i in range(5):
        _touch(folder / f"{i}.jsonl", mtime_ns=1_000 + i)

    def reader():
        return fs.FileStreamReader({"path": str(folder), "ledger": str(ledger), "maxFilesPerTrigger": "2"})

    first = reader()
    end = first.latestOffset({"files": 0}, first.getDefaultReadLimit())
    assert end == {"files": 2}
    names = [os.path.basename(r.path) for p in first.partitions({"files": 0}, end) for r in p.ranges]
    assert names == ["0.jsonl", "1.jsonl"]
    with ledger.open("a") as f:
        f.write('{"path": "/torn')  # a crash mid-append
    for i in (5, 6):
        _touch(folder / f"{i}.jsonl", mtime_ns=1_000 + i)
    second = reader()  # the torn line is cut off before the new files are appended
    assert second.latestOffset({"files": 4}, second.getDefaultReadLimit()) == {"files": 6}
    third = reader()
    listed = [
        os.path.basename(r.path) for p in third.partitions({"files": 0}, {"files": 7}) for r in p.ranges
    ]
    assert listed == [f"{i}.jsonl" for i in range(7)]
    with pytest.raises(ls.CorruptStateError, match="offsets name 9 files"):
        third.partitions({"files": 7}, {"files": 9})
    ledger.write_text(ledger.read_text().replace('"size"', '"sighs"', 1))
    with pytest.raises(ls.CorruptStateError, match="line 1 is damaged"):
        reader()


def test_small_files_are_packed_into_about_one_partition_per_core_in_order():
    kb = 1000
    files = [fs.FileRange(f"/in/{i}.jsonl", 400 * kb) for i in range(8)]
    two = fs.pack(files, 2)  # the docstring's worked example
    assert [[r.path for r in p.ranges] for p in two] == [
        [f"/in/{i}.jsonl" for i in k] for k in (range(4), range(4, 8))
    ]
    assert len(fs.pack(files, 1)) == 1  # one core: one task
    three = fs.pack([fs.FileRange(f"/in/{i}", 1000 * kb) for i in range(3)], 2)
    assert [len(p.ranges) for p in three] == [1, 2]  # balanced: not three partitions
    assert len(fs.pack(files, 8)) == 5  # no more partitions than make MIN_SPLIT_BYTES each: 5.3 MB / 1 MiB
    assert len(fs.pack(files[:1], 2)) == 1 and fs.pack([], 2) == []
    big = fs.partitions_of([("/in/big.jsonl", 10 * kb * kb, 0, "")], 2)  # the docstring's 10 MB file
    assert [[(r.start, r.end) for r in p.ranges] for p in big] == [
        [(0, 5 * kb * kb)],
        [(5 * kb * kb, 10 * kb * kb)],
    ]
    huge = fs.partitions_of([("/in/huge.jsonl", 1 << 30, 0, "")], 2)  # ranges of at most MAX_SPLIT_BYTES
    assert len(huge) == 32 and all(len(p.ranges) == 1 for p in huge)
    follow = fs.partitions_of([("/in/a", 3 * kb * kb, 2 * kb * kb, "k1"), ("/in/b", 1, 0, "k2")], 2)
    assert [[(r.path, r.start, r.end, r.key) for r in p.ranges] for p in follow] == [
        [("/in/a", 2 * kb * kb, 3 * kb * kb, "k1"), ("/in/b", 0, 1, "k2")]  # from where it was read to
    ]  # 1.5 MB with the open costs: under two partitions of MIN_SPLIT_BYTES, so one


def test_a_file_is_read_up_to_its_listed_size_and_a_vanished_one_does_not_fail(tmp_path, caplog):
    path = tmp_path / "grow.jsonl"
    path.write_bytes(b"a\nb\n")
    entry = ls.scan(path).files[0]
    with path.open("ab") as f:
        f.write(b"c\nd")  # still being written after it was listed
    r = fs.FileStreamReader.__new__(fs.FileStreamReader)
    r.root, r.options = str(tmp_path), {}  # no screening: the lines themselves
    got = [
        v
        for b in r.read(fs.FileRanges([fs.FileRange(entry.path, entry.size)]))
        for v in b.column(0).to_pylist()
    ]
    assert got == [b"a", b"b"]
    path.unlink()
    assert list(r.read(fs.FileRanges([fs.FileRange(entry.path, entry.size)]))) == []
    assert "could not read" in caplog.text


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
def test_lines_split_like_a_text_reader_at_any_chunk_size(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(fs, "_CHUNK", chunk)
    data = b'{"a":1}\r\n\n\xff\xfe junk\n{"b":2}\nlast'
    (tmp_path / "f").write_bytes(data)
    got = [v for arr in fs.read_lines(str(tmp_path / "f")) for v in arr.to_pylist()]
    assert got == [b'{"a":1}', b"", b"\xff\xfe junk", b'{"b":2}', b"last"]


@pytest.mark.parametrize("tail", [b"\n", b"", b"\r\n"])
@pytest.mark.parametrize("split_bytes", [1, 7, 64, 1 << 20])
def test_a_file_split_into_ranges_reads_every_line_once(tmp_path, tail, split_bytes):
    lines = [b"x" * n for n in (0, 1, 5, 63, 64, 65, 200, 3, 0, 17)] + [b"last"]
    path = tmp_path / "f"
    path.write_bytes(b"\n".join(lines[:3]) + b"\r\n" + b"\n".join(lines[3:]) + tail)
    size = path.stat().st_size
    ranges = fs.split(str(path), size, 0, "", split_bytes)
    assert len(ranges) == max(1, -(-size // split_bytes))
    got = [
        v for r in ranges for arr in fs.read_lines(r.path, r.size, r.start, r.end) for v in arr.to_pylist()
    ]
    assert got == lines


def test_a_range_reads_only_to_the_listed_size(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"a\nbb\nccc\ndddd\n")  # grew after it was listed at 9 bytes
    got = [
        v
        for r in fs.split(str(path), 9, 0, "", 3)
        for arr in fs.read_lines(r.path, r.size, r.start, r.end)
        for v in arr.to_pylist()
    ]
    assert got == [b"a", b"bb", b"ccc"]


def test_a_file_the_format_cannot_read_arriving_while_the_query_runs_is_named_once_and_skipped(
    tmp_path, caplog
):
    import gzip

    folder, ledger = tmp_path / "in", tmp_path / "ck" / ls.LEDGER
    _touch(folder / "a.jsonl", text='{"timestamp": 1, "principal": "User:a", "producer_id": 1}\n')
    reader = fs.FileStreamReader({"path": str(folder), "ledger": str(ledger)})
    assert reader.latestOffset({"files": 0}, None) == {"files": 1}
    request_log = "[2026-01-01 00:00:00,000] DEBUG Completed request:{} (kafka.request.logger)\n"
    _touch(folder / "broker.log", text=request_log * 3)
    (folder / "b.jsonl.gz").write_bytes(gzip.compress(b'{"principal": "User:b"}\n'))
    _touch(folder / "c.jsonl", text='{"timestamp": 2, "principal": "User:c", "producer_id": 2}\n')
    assert reader.latestOffset({"files": 1}, None) == {"files": 2}  # c.jsonl alone
    assert reader.latestOffset({"files": 2}, None) == {"files": 2}  # and they are named once
    said = sorted(r.getMessage() for r in caplog.records if r.name == "pidquota.files")
    gz = folder / "b.jsonl.gz"
    assert said == [
        f"pidquota: {gz} is gzip-compressed, and pidquota reads plain-text lines: unpack it (gunzip {gz}) "
        "or move it out of the input; it is not read, and the stream goes on",
        f"pidquota: {folder / 'broker.log'} holds Kafka request-log lines, not JSON events: add "
        "--input-format kafka-request-log; it is not read, and the stream goes on",
    ]
    assert [os.path.basename(e.path) for e in ls.read_ledger(ledger)] == ["a.jsonl", "c.jsonl"]
