"""Rolling per-batch output files into one, and deleting old ones (``streaming/outputs/retention.py``)."""

from __future__ import annotations

import os

import pytest

from pidquota.cli.output_folder import _part_file
from pidquota.streaming.outputs import retention
from pidquota.streaming.outputs.reader import read_output

HOUR = 3_600_000
NOW = 1_800_000_000.0


def write_parts(folder, batches, age_s=7200.0):
    folder.mkdir(parents=True, exist_ok=True)
    for b in batches:
        path = folder / retention.part_name(b)
        path.write_text("".join(f'{{"batch_id": {b}, "row": {k}}}\n' for k in range(2)))
        os.utime(path, (NOW - age_s + b, NOW - age_s + b))


def rows(out):
    return list(zip(read_output(out, "decisions").batch_id, read_output(out, "decisions").row, strict=True))


def test_parts_before_the_current_batch_roll_into_one_file_in_order(tmp_path):
    folder = tmp_path / "decisions"
    write_parts(folder, [0, 1, 2, 3])
    before = rows(tmp_path)
    rolled = retention.roll(folder, current_batch=3, roll_ms=HOUR, now=NOW)
    assert rolled.name == "roll-0000000000-0000000002.jsonl"
    assert sorted(p.name for p in folder.iterdir()) == sorted([rolled.name, "part-0000000003.jsonl"])
    assert rows(tmp_path) == before  # every row once, in batch order


def test_nothing_rolls_before_the_oldest_part_is_roll_ms_old_or_with_rolling_off(tmp_path):
    folder = tmp_path / "decisions"
    write_parts(folder, [0, 1, 2], age_s=60)
    assert retention.roll(folder, 3, HOUR, NOW) is None
    assert retention.roll(folder, 3, 0, NOW + 10 * HOUR) is None
    assert len(list(folder.iterdir())) == 3


def test_a_replayed_batch_after_a_roll_is_its_own_part(tmp_path):
    folder = tmp_path / "decisions"
    write_parts(folder, [0, 1, 2, 3])
    retention.roll(folder, 3, HOUR, NOW)  # batch 3 in flight; then a crash, and Spark replays 3
    write_parts(folder, [3])
    assert rows(tmp_path) == [(b, k) for b in range(4) for k in range(2)]


def test_a_crash_between_the_rename_and_the_deletes_is_repaired(tmp_path):
    folder = tmp_path / "decisions"
    write_parts(folder, [0, 1, 2, 3, 4])
    retention.roll(folder, 3, HOUR, NOW)
    write_parts(folder, [0, 1])  # as if their deletes never happened
    assert rows(tmp_path) == [(b, k) for b in range(5) for k in range(2)]  # listed once, not twice
    second = retention.roll(folder, 5, HOUR, NOW)
    assert second.name == "roll-0000000003-0000000004.jsonl"
    assert sorted(p.name for p in folder.iterdir()) == [
        "roll-0000000000-0000000002.jsonl",
        "roll-0000000003-0000000004.jsonl",
    ]
    assert rows(tmp_path) == [(b, k) for b in range(5) for k in range(2)]


def test_retention_deletes_only_files_older_than_it(tmp_path):
    folder = tmp_path / "decisions"
    write_parts(folder, [0, 1], age_s=8 * 24 * 3600)
    write_parts(folder, [2], age_s=60)
    (folder / "notes.txt").write_text("not ours")
    os.utime(folder / "notes.txt", (0, 0))
    gone = retention.expire(folder, 7 * 24 * HOUR, NOW)
    assert sorted(p.name for p in gone) == ["part-0000000000.jsonl", "part-0000000001.jsonl"]
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt", "part-0000000002.jsonl"]
    assert retention.expire(folder, 0, NOW + 10**9) == []


def test_a_rolled_folder_is_still_pidquota_output(tmp_path):
    folder = tmp_path / "decisions"
    write_parts(folder, [0, 1, 2])
    rolled = retention.roll(folder, 2, HOUR, NOW)
    assert _part_file(rolled) and _part_file(folder / "part-0000000002.jsonl")


def test_a_roll_reaching_the_current_batch_stops_rolling_and_deletes_nothing(tmp_path):
    folder = tmp_path / "decisions"
    write_parts(folder, [0, 1, 2, 3])
    retention.roll(folder, 3, HOUR, NOW)
    write_parts(folder, [0])  # a new checkpoint writing into the same folder
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(retention.OutputClash, match="another checkpoint"):
        retention.roll(folder, 0, HOUR, NOW)
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_roll_keeps_the_newest_parts_time_and_a_failed_one_leaves_the_parts(tmp_path, monkeypatch):
    folder = tmp_path / "decisions"
    write_parts(folder, [0, 1, 2])
    newest = (folder / retention.part_name(1)).stat().st_mtime
    rolled = retention.roll(folder, 2, HOUR, NOW)
    assert rolled.stat().st_mtime == newest  # retention counts from the newest row
    write_parts(folder, [3, 4])

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(retention.os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        retention.roll(folder, 4, HOUR, NOW)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [rolled.name, "part-0000000002.jsonl"]
        + [retention.part_name(b) for b in (3,)]
        + ["part-0000000004.jsonl"]
    )


def test_a_reader_lists_again_when_a_roll_moves_the_files(tmp_path, monkeypatch):
    from pidquota.streaming.outputs import reader as outputs

    folder = tmp_path / "decisions"
    write_parts(folder, [0, 1, 2])
    expected = rows(tmp_path)
    real = outputs.output_files
    calls = []

    def listing_then_roll(out, name):
        files = real(out, name)
        if not calls:
            retention.roll(folder, 2, HOUR, NOW)  # between the listing and the reads
        calls.append(files)
        return files

    monkeypatch.setattr(outputs, "output_files", listing_then_roll)
    assert rows(tmp_path) == expected and len(calls) >= 2
