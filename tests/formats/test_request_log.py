"""The broker request log as input (formats/request_log.py), on a corpus written as
Kafka writes it (traffic/request_log.py): other API keys, granted and refused inits,
re-inits, InitProducerId v0 to v5, the raw and shipper shapes, and broken lines."""

import json

import pyarrow as pa
import pytest

from pidquota.formats.folded import FOLDED
from pidquota.formats.request_log import (
    NOT_A_REQUEST,
    REFUSED,
    Clock,
    Options,
    RequestLogJudge,
    RequestLogScreen,
    connection_ends,
    key_name,
    software,
)
from pidquota.quota.client import Client
from pidquota.traffic import request_log as rl

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
FILES = pa.schema([("value", pa.binary()), ("source_file", pa.string())])


def init(
    ms=T0, principal="User:alice", pid=4000, epoch=0, version=4, error=0, txn=None, client="app-1", tz="UTC"
):
    req, resp = rl.init_producer_id(version, txn, error, pid, epoch)
    return rl.request_line(ms, rl.INIT_PRODUCER_ID, version, req, resp, principal, client, 2, tz)


def noise(ms=T0, key=rl.FETCH):
    req, resp = rl.fetch(1, "orders", 0, 77) if key == rl.FETCH else rl.metadata("orders")
    return rl.request_line(ms, key, 12, req, resp)


DEFAULT = Options()


def judge(lines, options=DEFAULT, max_principal=256, brokers=None):
    values = pa.array([x.encode() for x in lines], pa.binary())
    sources = [f"file:///logs/b{i}" for i in range(len(lines))]
    return RequestLogJudge(options, max_principal).judge(values, sources, brokers or [None] * len(lines))


def test_other_api_keys_are_counted_per_key_and_never_parsed():
    lines = (
        [noise() for _ in range(95)]
        + [noise(key=rl.METADATA) for _ in range(3)]
        + ["", "[x] INFO hello (other)"]
    )
    out = judge(lines)
    assert out.events == [] and out.dead == []
    assert out.skipped == {"FETCH": 95, "METADATA": 3, NOT_A_REQUEST: 2}


@pytest.mark.parametrize("version", range(6))
def test_a_granted_init_of_every_version_is_an_event(version):
    line = init(T0 + 123, "User:alice", 4000 + version, 3, version, txn="tx-1" if version % 2 else None)
    (event,) = judge([line]).events
    assert event == {
        "timestamp": T0 + 123,
        "principal": "User:alice",
        "producer_id": 4000 + version,
        "producer_epoch": 3,
        "client_id": "app-1",
        "transactional_id": "tx-1" if version % 2 else None,
        "client_address": "10.0.1.2",
        "client_software": "apache-kafka-java 3.7.0",
        "listener": "10.0.0.1:9093",
        "broker": "10.0.0.1:9093",  # no shipper's host, no broker named for the file: the listener
    }


@pytest.mark.parametrize(
    "connection, ends",
    [
        ("127.0.0.1:9092-10.0.0.5:55158-0", ("127.0.0.1:9092", "10.0.0.5")),
        ("10.0.0.1:9093-10.0.1.7:50007-3-12", ("10.0.0.1:9093", "10.0.1.7")),
        ("0:0:0:0:0:0:0:1:9092-0:0:0:0:0:0:0:1:41234-1", ("0:0:0:0:0:0:0:1:9092", "0:0:0:0:0:0:0:1")),
        ("fe80::1%eth-0:9092-fe80::2%br-lan:5555-2", ("fe80::1%eth-0:9092", "fe80::2%br-lan")),  # zone ids
        ("[::1]:9092-fe80::7%eth-1:4444-1-0", ("[::1]:9092", "fe80::7%eth-1")),
        ("garbage", (None, None)),
        ("a-b-c", (None, None)),
        (None, (None, None)),
        (7, (None, None)),
    ],
)
def test_the_client_address_is_the_remote_end_of_the_connection(connection, ends):
    assert connection_ends(connection) == ends


def test_the_software_is_name_and_version_and_unknown_is_nothing():
    assert software({"softwareName": "librdkafka", "softwareVersion": "2.6.1"}) == "librdkafka 2.6.1"
    assert software({"softwareName": "unknown", "softwareVersion": "unknown"}) is None
    assert software("x") is None and software(None) is None


def test_the_screen_folds_each_pid_with_its_client():
    lines = [init(T0, pid=9, client="app-1"), init(T0 + 1, "User:alice", 10, client="app-2")]
    screen = RequestLogScreen(FILES, 256, Options(), broker_of=lambda source: "broker-3")
    batch = pa.RecordBatch.from_arrays(
        [pa.array([x.encode() for x in lines], pa.binary()), pa.array(["file:///l"] * 2)], schema=FILES
    )
    (row,) = next(screen.screen(batch)).to_pylist()
    clients = dict(zip(row["f_client_pids"], map(Client.parse, row["f_clients"]), strict=True))
    assert clients == {
        9: Client("app-1", None, "10.0.1.2", "apache-kafka-java 3.7.0", "broker-3"),
        10: Client("app-2", None, "10.0.1.2", "apache-kafka-java 3.7.0", "broker-3"),
    }


def test_a_refused_init_grants_nothing_and_is_counted():
    for error in (
        51,
        53,
        15,
    ):  # CONCURRENT_TRANSACTIONS, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, COORDINATOR_NOT_AVAILABLE
        out = judge([init(error=error)])
        assert out.events == [] and out.dead == [] and out.skipped == {REFUSED: 1}


def test_a_reinit_returns_the_same_pid_with_a_higher_epoch_and_folds_to_one_row():
    lines = [init(T0, pid=9, epoch=0, txn="tx"), init(T0 + 5, pid=9, epoch=1, txn="tx"), init(T0 + 9, pid=10)]
    schema = pa.schema([*FOLDED, *FILES])
    screen = RequestLogScreen(FILES, 256, Options())
    batch = pa.RecordBatch.from_arrays(
        [pa.array([x.encode() for x in lines], pa.binary()), pa.array(["file:///l"] * 3)], schema=FILES
    )
    (out,) = list(screen.screen(batch))
    assert out.schema == schema
    rows = out.to_pylist()  # one row per principal, its sightings in step
    assert [(r["f_producer_ids"], r["f_timestamps"], r["f_epochs"]) for r in rows] == [
        ([9, 9, 10], [T0, T0 + 5, T0 + 9], [0, 1, 0]),
    ]
    assert not any(r["check"] for r in rows)


def test_broken_lines_are_dead_letters_with_their_reason():
    good = init()
    cases = {
        good[: len(good) // 2]: "cut or damaged",
        good.replace('"producerId":4000,', ""): "missing field response.producerId",
        good.replace("2026-01-01 00:00:00,000", "2026-13-01 00:00:00,000"): "no such date",
        good.replace("2026-01-01 00:00:00,000", "01/01/2026 00:00"): "bad time",
        good.replace('"principal":"User:alice",', ""): "missing field principal",
        good.replace('"principal":"User:alice"', '"principal":"  "'): "principal is empty",
        good.replace('"producerEpoch":0}', '"producerEpoch":"0"}'): "must be an integer",
        good.replace('"producerEpoch":0}', '"producerEpoch":40000}'): "out of range",
        good.replace(',"response":{', ',"response":"",{'): "not valid",
        good.replace(" (kafka.request.logger)", ""): "cut or damaged",
        '[2026-01-01 00:00:00,000] DEBUG Completed request:{"isForwarded":false,"requestHe': "without a requestApiKey",
    }
    out = judge(list(cases))
    assert out.events == [] and out.skipped == {}
    assert len(out.dead) == len(cases)
    for letter, (raw, why) in zip(out.dead[1:], list(cases.items())[:-1], strict=True):
        assert letter["raw"] == raw and why in letter["reason"], (letter, why)
    assert "without a requestApiKey" in out.dead[0]["reason"] and out.dead[0]["source"] == "file:///logs/b10"


def test_a_long_principal_is_a_dead_letter():
    (letter,) = judge([init(principal="User:" + "x" * 40)], max_principal=20).dead
    assert letter["reason"] == "principal is longer than 20 characters"


def test_the_time_is_read_in_the_brokers_time_zone():
    line = init(T0, tz="Europe/Berlin")  # written as 01:00 local
    assert "[2026-01-01 01:00:00,000]" in line
    assert judge([line], Options(timezone="Europe/Berlin")).events[0]["timestamp"] == T0
    assert judge([line]).events[0]["timestamp"] == T0 + 3_600_000  # read as UTC: an hour off
    # The hour repeated when clocks go back (2026-10-25 02:00-03:00 in Berlin): the earlier.
    assert Clock("Europe/Berlin").ms("2026-10-25 02:30:00,000") == 1_792_888_200_000


SHIPPED = {
    "filebeat": lambda line: {
        "@timestamp": "2026-01-01T00:00:00.000Z",
        "message": line,
        "host": {"name": "broker-1"},
        "log": {"file": {"path": "/var/log/kafka/kafka-request.log"}, "offset": 77},
        "agent": {"type": "filebeat"},
    },
    "vector": lambda line: {"file": "/var/log/kafka/kafka-request.log", "host": "broker-1", "message": line},
    "fluent-bit": lambda line: {"log": line},
}


@pytest.mark.parametrize("shipper", SHIPPED)
def test_a_shippers_json_record_is_unwrapped(shipper):
    records = [json.dumps(SHIPPED[shipper](x)) for x in (init(), noise(), noise(key=rl.METADATA))]
    out = judge(records)
    assert out.skipped == {"FETCH": 1, "METADATA": 1} and out.dead == []
    (event,) = out.events
    assert event["producer_id"] == 4000
    assert event["broker"] == (
        "10.0.0.1:9093" if shipper == "fluent-bit" else "broker-1"
    )  # no host: listener


def test_the_message_field_is_a_setting_and_a_wrong_one_is_named():
    record = json.dumps({"line": init(), "hostname": "b7"})
    (letter,) = judge([record]).dead
    assert "message, log" in letter["reason"] and "pidquota.request.log.message.fields" in letter["reason"]
    (event,) = judge([record], Options(message_fields=("line",))).events
    assert event["broker"] == "b7"


def test_every_line_is_an_event_a_dead_letter_or_counted():
    lines = [init(pid=i) for i in range(5)] + [noise()] * 50 + [init(error=51)] + ["garbage", init()[:90]]
    out = judge(lines)
    assert len(out.events) + len(out.dead) + sum(out.skipped.values()) == len(lines)


def test_key_names_are_kafkas_and_bounded():
    assert (key_name(0), key_name(1), key_name(22), key_name(61)) == (
        "PRODUCE",
        "FETCH",
        "INIT_PRODUCER_ID",
        "DESCRIBE_PRODUCERS",
    )
    assert key_name(500) == "API_KEY_500" and key_name(99999) == "API_KEY_OTHER"


def test_the_generator_writes_the_log_of_its_events():
    events = [
        json.dumps({"timestamp": T0 + i, "principal": "User:a", "producer_id": i // 3, "producer_epoch": 0})
        for i in range(9)
    ]
    lines = list(rl.from_events(events, noise=10))
    assert len(lines) == 3 + 9 + 90
    out = judge(lines)
    assert [e["producer_id"] for e in out.events] == [0, 1, 2]
    assert out.skipped == {"PRODUCE": 9, "FETCH": 72, "METADATA": 18}


def test_null_records_and_hostile_json_never_fail_the_screen():
    values = pa.array([None, init().encode(), None], pa.binary())
    out = RequestLogJudge(Options(), 256).judge(values, [None] * 3, [None] * 3)
    assert len(out.events) == 1 and out.skipped == {NOT_A_REQUEST: 2}
    deep = init().replace('"request":{', '"request":' + "[" * 100_000 + "{", 1)
    huge = init().replace('"producerId":4000', '"producerId":' + "9" * 5000, 1)
    ancient = init(ms=0).replace("1970-01-01 00:00:00,000", "1969-12-31 23:59:59,000")
    out = judge([deep, huge, ancient])
    assert [d["reason"] for d in out.dead] == [
        "request-log JSON is not valid (cut or damaged): nested too deep to read (over ~1,000 levels of '[' or '{')",
        "request-log JSON is not valid (cut or damaged): a number too long to read (over 4,300 digits)",
        "bad time '1969-12-31 23:59:59,000': before 1970 or after 9999",
    ]


def test_a_docker_json_log_line_ends_in_a_newline():
    record = json.dumps({"log": init() + "\n", "stream": "stdout", "time": "2026-01-01T00:00:00Z"})
    (event,) = judge([record]).events
    assert event["producer_id"] == 4000
