"""The log audit (formats/record_batches.py, store/owners.py), Spark-free: topic owners from a
file and Redis with prefixes, batch headers read without decompressing, control batches
and batches without a producer id counted, epochs and re-inits folded."""

import json
import struct

import pyarrow as pa
import pytest

from pidquota.conf.errors import ConfigError
from pidquota.formats.record_batches import CONTROL_BATCH, LEGACY, NO_PRODUCER_ID, NO_TIMESTAMP, AuditScreen
from pidquota.sources.kafka.records import ARROW, HEADERS, batch_headers, walk
from pidquota.store.keys import Keys
from pidquota.store.owners import Owners, load_owners

T0 = 1_767_225_600_000


def test_owners_exact_then_longest_prefix_then_the_topic_itself():
    owners = Owners({"orders": "User:a", "pay-*": "User:b", "pay-eu-*": "User:c", "orders-*": "User:d"})
    assert [owners.of(t) for t in ("orders", "pay-us", "pay-eu-1", "orders-v2", "logs")] == [
        "User:a",
        "User:b",
        "User:c",
        "User:d",
        "Topic:logs",
    ]


@pytest.mark.parametrize("bad", [{"orders": "alice"}, {"*": "User:a"}, {"orders": 5}])
def test_a_bad_owner_is_named(bad):
    with pytest.raises(ConfigError, match="give a topic .or a PREFIX.. and a principal such as User:alice"):
        Owners(bad)


def test_owners_from_a_file_and_its_mistakes(tmp_path):
    path = tmp_path / "owners.json"
    path.write_text(json.dumps({"topics": {"orders": "User:a", "pay-*": "User:b"}}))
    assert Owners.from_file(path).of("pay-x") == "User:b"
    path.write_text(json.dumps({"orders": "User:a"}))
    with pytest.raises(ConfigError, match='must be {"topics"'):
        Owners.from_file(path)
    path.write_text("{")
    with pytest.raises(ConfigError, match="is not JSON"):
        Owners.from_file(path)
    with pytest.raises(ConfigError, match="cannot read"):
        Owners.from_file(tmp_path / "missing.json")


def test_owners_from_redis(redis_server, redis_client):
    from pidquota.conf.loader import load

    key = Keys("audit-test").topic_owners
    redis_client.delete(key)
    redis_client.hset(key, mapping={"orders": "User:a", "pay-*": "User:b"})
    config = load(
        overrides={
            "pidquota.audit.owners": "redis",
            "pidquota.redis.url": redis_server,
            "pidquota.redis.prefix": "audit-test",
        },
        environ={},
    )
    owners = load_owners(config)
    assert (owners.of("orders"), owners.of("pay-1"), owners.of("x")) == ("User:a", "User:b", "Topic:x")
    with pytest.raises(ConfigError, match="needs pidquota.redis.url"):
        load_owners(load(overrides={"pidquota.audit.owners": "redis"}, environ={}))


def batch(base, pid, epoch, ts, attrs=0, count=2, body=b"\x00" * 20, magic=2):
    """A record batch (magic 2) with ``body`` as its records: the header as Kafka writes it."""
    header = struct.pack(">ibIhiqqqhii", 0, magic, 0, attrs, count - 1, ts - 5, ts, pid, epoch, 0, count)
    return struct.pack(">qi", base, len(header) + len(body)) + header + body


def test_headers_are_read_without_decompressing():
    garbage = b"\xde\xad\xbe\xef" * 8  # not zstd: decompressing it would fail
    data = batch(10, 7, 0, T0, attrs=4, body=garbage) + batch(12, 7, 1, T0 + 9, attrs=1, body=garbage)
    data += batch(14, 8, 0, T0 + 20)[:-5]  # cut by the fetch size: the next fetch's
    headers = batch_headers(walk(data, 10, 100))
    assert headers.schema == HEADERS
    assert headers.to_pydict() == {
        "producer_id": [7, 7],
        "producer_epoch": [0, 1],
        "timestamp": [T0, T0 + 9],
        "attributes": [4, 1],
        "magic": [2, 2],
        "kafka_offset": [10, 12],
        "records": [2, 2],
    }
    assert batch_headers(walk(data, 12, 100)).column("kafka_offset").to_pylist() == [12]


def _headers(rows, topic="orders"):
    cols = list(zip(*rows, strict=True))
    arrays = [pa.array(c, f.type) for c, f in zip(cols, HEADERS, strict=True)]
    arrays += [pa.array([topic] * len(rows), pa.string()), pa.array([0] * len(rows), pa.int32())]
    return pa.RecordBatch.from_arrays(arrays, names=[*HEADERS.names, "kafka_topic", "kafka_partition"])


def test_control_batches_and_batches_without_a_pid_are_counted_and_sightings_folded():
    rows = [
        (7, 0, T0, 0x10, 2, 0, 3),  # transactional data
        (7, 0, T0 + 5, 0x30, 2, 3, 1),  # its commit marker (control)
        (7, 1, T0 + 9, 0x10, 2, 4, 3),  # re-init: the same PID, a higher epoch
        (-1, -1, T0 + 10, 0, 2, 7, 5),  # not idempotent
        (9, 0, -1, 0, 2, 12, 1),  # no timestamp
        (-1, -1, -1, 0, 1, 13, 1),  # a legacy message set
    ]
    out = list(AuditScreen(Owners({"ord*": "User:a"}), ARROW).screen(_headers(rows)))
    folded, counts = out[0].to_pylist(), out[1].to_pylist()
    assert [(r["f_principal"], r["f_producer_ids"], r["f_timestamps"], r["f_epochs"]) for r in folded] == [
        ("User:a", [7, 7], [T0, T0 + 9], [0, 1])
    ]
    assert json.loads(counts[0]["f_dead"]) == {
        "skipped": {CONTROL_BATCH: 1, LEGACY: 1, NO_PRODUCER_ID: 1, NO_TIMESTAMP: 1}
    }
    assert not any(r["check"] for r in folded + counts)


def test_an_unowned_topic_is_its_own_principal():
    (out,) = AuditScreen(Owners({}), ARROW).screen(_headers([(7, 0, T0, 0, 2, 0, 1)], topic="logs"))
    assert out.column("f_principal").to_pylist() == ["Topic:logs"]


def test_a_short_legacy_message_last_in_a_response_is_a_row_not_a_crash():
    legacy = struct.pack(">qi", 12, 22) + bytes([0, 0, 0, 0, 1, 0]) + bytes(16)  # magic 1, 34 bytes in all
    headers = batch_headers(walk(batch(10, 7, 0, T0) + legacy, 0, 100))
    assert headers.column("producer_id").to_pylist() == [7, -1]
    assert headers.column("magic").to_pylist() == [2, 1]


def test_output_topics_on_several_brokers_are_one_topic_each():
    from pidquota.conf.errors import PidquotaError
    from pidquota.conf.loader import load
    from pidquota.store.kafka import output_options

    config = load(
        overrides={"pidquota.kafka.decisions.topic": "kafka://k1:9092,k2:9092/decisions"}, environ={}
    )
    assert output_options(config, None)["decisionsTopic"] == "decisions"
    config = load(overrides={"pidquota.kafka.decisions.topic": "kafka://k1:9092/a,b"}, environ={})
    with pytest.raises(PidquotaError, match="an output topic is one topic"):
        output_options(config, None)


def test_a_pattern_never_matches_pidquotas_own_outputs_and_a_deleted_match_is_not_data_loss(caplog):
    from pidquota.sources.kafka.source import KafkaStreamReader

    class Client:
        def topics(self):
            return {"orders", "orders-decisions", "__consumer_offsets"}

    reader = KafkaStreamReader(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "orders*", "excludeTopics": "orders-decisions"}
    )
    reader._client = Client()
    assert reader._topic_names() == ["orders"]
    reader._partitions = lambda: []
    reader._end_offsets = lambda tps: {}
    import logging

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    with caplog.at_level(logging.WARNING, logger="pidquota.kafka"):
        assert reader.latestOffset({"orders-old": {"0": 5}}, ReadAllAvailable()) == {}
    assert "topic orders-old, matched by ['orders*'], is gone" in caplog.text


def test_the_format_and_the_transport_agree_on_the_control_bit():
    """The log audit's format and the Kafka transport each know Kafka's control-batch bit
    (a transport knows no format, so neither imports the other's)."""
    from pidquota.formats import record_batches
    from pidquota.sources.kafka import records

    assert record_batches.CONTROL == records.CONTROL == 0x20
