"""``--input-format kafka-request-log`` through the real query: broker logs from files (a
folder per broker, rolled and live files) and from a Kafka topic (raw lines and a log
shipper's JSON) decide exactly as the JSON events of the same granted inits do."""

import json

import pytest

from pidquota.formats.request_log import REFUSED
from pidquota.traffic import request_log as rl

T0 = 1_767_225_600_000
QUOTAS = {"User:crash": 20, "<default>": 1000}
FORMAT = {"pidquota.input.format": "kafka-request-log"}


def _inits():
    """(time, principal, PID, epoch): a crash loop, a steady producer that re-inits with a
    higher epoch (same PID), and a transactional one."""
    out = [(T0 + i * 2_000, "User:crash", 10_000 + i, 0) for i in range(60)]
    out += [(T0 + i * 30_000, "User:steady", 7, i) for i in range(4)]
    out += [(T0 + 5_000 + i * 40_000, "User:txn", 8, i) for i in range(3)]
    return sorted(out)


def _log(inits, broken=True):
    """Request-log lines: each init between noise, a refused init, and broken lines."""
    lines = []
    for n, (ts, user, pid, epoch) in enumerate(inits):
        req, resp = rl.init_producer_id(n % 6, "tx" if user == "User:txn" else None, 0, pid, epoch)
        lines.append(rl.request_line(ts, rl.INIT_PRODUCER_ID, n % 6, req, resp, user, f"c-{n}", n))
        req, resp = rl.fetch(1, "orders", 0, n)
        lines += [rl.request_line(ts, rl.FETCH, 13, req, resp)] * 9
    req, resp = rl.init_producer_id(4, "tx", 51)
    lines.append(rl.request_line(T0 + 1, rl.INIT_PRODUCER_ID, 4, req, resp, "User:txn"))
    if broken:
        lines += [lines[0][:150], lines[0].replace('"producerId":10000,', "")]
    return lines


def _events(inits):
    return [{"timestamp": t, "principal": u, "producer_id": p, "producer_epoch": e} for t, u, p, e in inits]


def _decided(frame):
    cols = ["principal", "producer_id", "producer_epoch", "timestamp", "verdict"]
    return sorted(map(tuple, frame[cols].itertuples(index=False)))


def test_broker_logs_in_files_decide_as_the_json_events_of_their_inits(make_enforcer, tmp_path):
    inits = _inits()
    expected = make_enforcer(tmp_path / "events", QUOTAS).run(_events(inits))
    assert (expected["decisions"]["verdict"] == "THROTTLE").any()  # the crash loop is throttled

    runner = make_enforcer(tmp_path / "log", QUOTAS, **FORMAT)
    lines = _log(inits)
    half = len(lines) // 2
    (runner.input / "broker-1").mkdir()
    (runner.input / "broker-2").mkdir()
    (runner.input / "broker-1" / "kafka-request.log.2026-01-01-00").write_text("\n".join(lines[:half]) + "\n")
    (runner.input / "broker-2" / "kafka-request.log").write_text("\n".join(lines[half:]) + "\n")
    got = runner._run(runner._files(0))

    assert _decided(got["decisions"]) == _decided(expected["decisions"])
    skipped = dict(zip(got["skipped"]["what"], got["skipped"]["count"], strict=True))
    assert skipped == {"FETCH": 9 * len(inits), REFUSED: 1}
    dead = got["dead-letters"]
    assert sorted(dead["reason"].str.split(":").str[0]) == [
        "missing field response.producerId",
        "request-log line is cut or damaged",
    ]
    assert dead["source"].str.endswith("broker-2/kafka-request.log").all()


def test_a_json_event_file_read_as_a_request_log_is_named_and_not_read(make_enforcer, tmp_path, capfd):
    """A file of JSON events arriving in a request-log input is sniffed (formats/recognise.py):
    one warning naming it and the flag, nothing read, nothing decided, the stream goes on."""
    runner = make_enforcer(tmp_path, QUOTAS, **FORMAT)
    out = runner.run(_events(_inits()))
    assert out["decisions"].empty and out["dead-letters"].empty and out["skipped"].empty
    err = capfd.readouterr().err
    assert "000-events.jsonl holds JSON events, not Kafka request-log lines: drop --input-format" in err


@pytest.mark.parametrize("shape", ["raw", "filebeat"])
def test_a_shippers_topic_decides_as_the_json_events(kafka, make_enforcer, tmp_path, shape):
    inits = _inits()
    expected = make_enforcer(tmp_path / "events", QUOTAS).run(_events(inits))
    lines = _log(inits, broken=False)
    if shape == "filebeat":
        lines = [
            json.dumps({"message": x, "host": {"name": "broker-3"}, "agent": {"type": "filebeat"}})
            for x in lines
        ]
    topic = f"request-log-{shape}"
    kafka.produce(topic, lines, partitions=1)  # one partition: the log's order, as one broker wrote it
    runner = make_enforcer(tmp_path / "log", QUOTAS, **FORMAT)
    got = runner.run_kafka(f"kafka://{kafka.bootstrap}/{topic}")
    assert _decided(got["decisions"]) == _decided(expected["decisions"])
    assert got["dead-letters"].empty


@pytest.mark.e2e
@pytest.mark.parametrize("fmt", ["events", "kafka-request-log"])
def test_a_topic_in_the_other_format_stops_the_run_in_one_line(kafka, tmp_path, fmt):
    """Forgetting --input-format on a topic (or giving it to a topic of events) stops the run
    at its first batch, in one line naming the flag; no dead letter is written."""
    from harness.cli import run_cli

    topic = f"wrong-format-{fmt}"
    lines = _log(_inits(), broken=False) if fmt == "events" else [json.dumps(e) for e in _events(_inits())]
    kafka.produce(topic, lines, partitions=1)
    r = run_cli(
        *("run", "--input", f"kafka://{kafka.bootstrap}/{topic}", "--once", "--input-format", fmt),
        *("--output", str(tmp_path / "out")),
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    fix = "add --input-format kafka-request-log" if fmt == "events" else "is --input-format right?"
    assert last.startswith("pidquota: error: ") and fix in last and topic in last, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "StreamingQueryException" not in r.stderr
    assert not list((tmp_path / "out" / "dead-letters").glob("*.jsonl"))
    if fmt == "events":  # the fix the line names, on the same output: no --fresh needed
        again = run_cli(
            *("run", "--input", f"kafka://{kafka.bootstrap}/{topic}", "--once"),
            *("--input-format", "kafka-request-log", "--output", str(tmp_path / "out")),
            cwd=tmp_path,
        )
        assert again.returncode == 0, again.stderr[-3000:]
        assert list((tmp_path / "out" / "decisions").glob("*.jsonl"))
