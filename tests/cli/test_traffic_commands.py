"""`pidquota generate` and `pidquota blocks`."""

import json
import re
from pathlib import Path

from pidquota.cli.main import main


def test_generate_writes_events_and_a_summary_then_blocks_prints_the_audit(tmp_path, capsys):
    out, blocks = tmp_path / "g.jsonl", tmp_path / "blocks.json"
    args = ["generate", "--duration", "10m", "--seed", "5", "--output", str(out), "--blocks", str(blocks)]
    assert main(args) == 0
    lines = out.read_text().splitlines()
    summary = json.loads((tmp_path / ".g.jsonl.summary.json").read_text())  # hidden: a run skips it
    assert summary["events"] == len(lines) > 1000
    assert summary["principals"]["User:crash-loop"]["behaviour"] == "crash-loop"
    err = capsys.readouterr().err
    assert "User:crash-loop" in err
    assert re.search(
        r"^pidquota: generate: 0:01:00 of 0:10:00 generated, [\d,]+ events written \(0 s\)$", err, re.M
    )
    assert main(["blocks", "--blocks", str(blocks)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["#", "broker_id", "broker_epoch", "start", "block_end"]
    assert (
        printed[-1]
        == f"{summary['cluster']['blocks_allocated']} blocks, {summary['cluster']['blocks_allocated'] * 1000:,} producer IDs"
    )


def test_generate_against_redis_blocks(tmp_path, redis_server, redis_client, capsys):
    out = tmp_path / "g.jsonl"
    assert main(["generate", "--duration", "2m", "--output", str(out), "--redis", redis_server]) == 0
    assert main(["blocks", "--redis", redis_server]) == 0
    assert "blocks," in capsys.readouterr().out
    assert redis_client.llen("{pidquota}:pid-blocks:audit") >= 1


def test_bad_arguments_are_one_line_errors(tmp_path, capsys):
    for bad in ("soon", "-5", "0"):
        assert main(["generate", "--duration", bad, "--output", str(tmp_path / "x")]) == 2
        assert f"--duration {bad!r} " in capsys.readouterr().err
    assert main(["generate", "--duration", "1m", "--mix", "nope", "--output", str(tmp_path / "x")]) == 2
    assert "neither a named mix" in capsys.readouterr().err
    assert main(["generate", "--rate", "0", "--output", str(tmp_path / "x")]) == 2
    assert "--rate must be > 0" in capsys.readouterr().err
    assert (
        main(["generate", "--output", str(tmp_path / "x"), "--redis", "redis://:secret@127.0.0.1:1/0"]) == 2
    )
    err = capsys.readouterr().err
    assert "cannot reach Redis at redis://***@127.0.0.1:1/0" in err and "secret" not in err


def test_generate_writes_the_request_log_of_its_traffic(tmp_path, capsys):
    import pyarrow as pa

    from pidquota.formats.request_log import Options, RequestLogJudge

    events, log = tmp_path / "g.jsonl", tmp_path / "kafka-request.log"
    # A block store of its own for each run: the same PIDs (KIP-730 numbering continues otherwise).
    assert (
        main(["generate", "--duration", "5m", "--blocks", str(tmp_path / "b1"), "--output", str(events)]) == 0
    )
    args = [
        "generate",
        "--duration",
        "5m",
        "--blocks",
        str(tmp_path / "b2"),
        "--format",
        "kafka-request-log",
        "--noise",
        "4",
        "--output",
        str(log),
    ]
    assert main(args) == 0
    assert "request-log lines" in capsys.readouterr().err
    assert (tmp_path / ".kafka-request.log.summary.json").exists()  # hidden: not read as a rolled log
    lines = log.read_text().splitlines()
    judged = RequestLogJudge(Options(), 256).judge(
        pa.array([x.encode() for x in lines]), [None] * len(lines), [None] * len(lines)
    )
    produced = [json.loads(x) for x in events.read_text().splitlines()]
    pids = {(e["principal"], e["producer_id"]) for e in produced if e["producer_id"] >= 0}
    assert {(e["principal"], e["producer_id"]) for e in judged.events} == pids
    assert judged.skipped["PRODUCE"] == len(produced) and judged.dead == []
    assert judged.skipped["FETCH"] + judged.skipped["METADATA"] == 4 * len(produced)
    assert main(["generate", "--noise", "-1", "--format", "kafka-request-log", "--output", str(log)]) == 2
    assert "--noise must be >= 0" in capsys.readouterr().err


def test_clients_refuses_a_bad_rate_before_connecting(capsys):
    assert main(["clients", "--to", "kafka://127.0.0.1:1/t", "--behaviour", "steady", "--rate", "0"]) == 2
    assert "--rate must be > 0" in capsys.readouterr().err


def test_try_it_without_a_cluster_runs_without_a_warning(tmp_path, capsys, no_spark):
    """docs/real-cluster.md's "Try it without a cluster": generate's hidden summary beside the
    log it wrote is not named as a file the run passes over (nor read)."""
    log = tmp_path / "logs" / "broker-1" / "kafka-request.log"
    log.parent.mkdir(parents=True)
    gen = ["generate", "--duration", "2m", "--format", "kafka-request-log", "--output", str(log)]
    assert main([*gen, "--blocks", str(tmp_path / "blocks.json")]) == 0
    assert (log.parent / ".kafka-request.log.summary.json").exists()
    capsys.readouterr()
    run = ["run", "--input", str(tmp_path / "logs"), "--input-format", "kafka-request-log", "--once"]
    assert main([*run, "--output", str(tmp_path / "logs-out")]) == 2
    err = capsys.readouterr().err
    assert err == "pidquota: error: Spark would start here\n"


def test_generate_leaves_nothing_in_the_folder_it_runs_in(tmp_path, monkeypatch, capsys):
    """The block store lives in the user's state folder, not the working folder."""
    work, state = tmp_path / "work", tmp_path / "state"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    parser_default = __import__("pidquota.cli.blocks", fromlist=["default_blocks"]).default_blocks()
    assert parser_default == str(state / "pidquota" / "pid-blocks.json")
    assert main(["generate", "--duration", "1m", "--output", "out/events.jsonl"]) == 0
    assert sorted(p.name for p in work.iterdir()) == ["out"]
    assert (state / "pidquota" / "pid-blocks.json").exists()
    assert main(["blocks"]) == 0
    assert "blocks," in capsys.readouterr().out


def test_a_store_left_in_the_working_folder_by_an_earlier_pidquota_is_still_used(tmp_path, monkeypatch):
    from pidquota.cli.blocks import default_blocks

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_blocks() == str(tmp_path / "state" / "pidquota" / "pid-blocks.json")
    (tmp_path / "pidquota-blocks.json").write_text("{}")
    assert default_blocks() == "pidquota-blocks.json"


def test_the_readmes_events_flow_reads_the_events_alone(tmp_path, capsys, no_spark):
    """generate --output in/events.jsonl, then run --input in: its summary beside the events
    is hidden, so the folder holds one file to read (it was read as 68 dead letters)."""
    from pidquota.sources.listing import scan

    events = tmp_path / "in" / "events.jsonl"
    assert main(["generate", "--duration", "1m", "--output", str(events)]) == 0
    assert (events.parent / ".events.jsonl.summary.json").exists()
    assert [Path(f.path).name for f in scan(events.parent).files] == ["events.jsonl"]
