"""A query that fails anyway names the input of the batch that failed (issue 44: if something
still escapes one day, an operator can find the record and act)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from pidquota.cli import checkpoints
from pidquota.cli.run import _query_failed
from pidquota.sources import listing


def _checkpoint(tmp_path: Path, offsets: list[dict], committed: int) -> Path:
    ck = tmp_path / "_checkpoint"
    (ck / "offsets").mkdir(parents=True)
    (ck / "commits").mkdir()
    for n, offset in enumerate(offsets):
        (ck / "offsets" / str(n)).write_text('v1\n{"batchWatermarkMs":0}\n' + json.dumps(offset))
        if n < committed:
            (ck / "commits" / str(n)).write_text("v1\n{}")
    return ck


def test_a_failed_file_batch_names_its_files(tmp_path):
    ck = _checkpoint(tmp_path, [{"files": 1}, {"files": 3}], committed=1)
    entries = [listing.FileEntry(f"/in/{x}.jsonl", 1, 2) for x in "abc"]
    (ck / listing.LEDGER).write_text("".join(e.to_json() + "\n" for e in entries))
    assert checkpoints.failed_input(ck) == "batch 1, which read /in/b.jsonl, /in/c.jsonl"
    plan = SimpleNamespace(checkpoint=str(ck), out=tmp_path)
    line = str(_query_failed(RuntimeError("ValueError: boom"), plan, "1g"))
    assert line.startswith("the streaming query failed at batch 1, which read /in/b.jsonl, /in/c.jsonl: ")
    assert "move it out of the input" in line


def test_a_failed_kafka_batch_names_its_partitions_and_offsets(tmp_path):
    ck = _checkpoint(tmp_path, [{"t": {"0": 10, "1": 4}}, {"t": {"0": 25, "1": 4}}], committed=1)
    assert checkpoints.failed_input(ck) == "batch 1, which read t partition 0 offsets 10..24"


def test_nothing_pending_names_nothing(tmp_path):
    assert checkpoints.failed_input(_checkpoint(tmp_path, [{"files": 1}], committed=1)) is None
    assert checkpoints.failed_input(tmp_path / "nowhere") is None
    plan = SimpleNamespace(checkpoint=str(tmp_path / "nowhere"), out=tmp_path)
    assert str(_query_failed(RuntimeError("boom"), plan, "1g")) == "the streaming query failed: boom"
