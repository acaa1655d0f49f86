"""The record batch decoder (sources/kafka/records.py) and the read loop (fetch.py), without
a broker or Spark: batches are built with kafka-python's own builders and the
decoder's rows compared with kafka-python's decoder (MemoryRecords)."""

import random
import signal
import struct
from types import SimpleNamespace

import pytest
from harness.hostile import FAST
from hypothesis import given
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from pidquota.sources.kafka import connection
from pidquota.sources.kafka import fetch as kafka_fetch
from pidquota.sources.kafka import records as kafka_records
from pidquota.sources.kafka.records import decode
from pidquota.store.kafka import KafkaError

ATTRIBUTES_AT, LAST_DELTA_AT = 21, 23  # byte positions in the batch header
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def batch(base: int, records: list, codec: int = 0, attrs: int = 0, last_delta: int | None = None) -> bytes:
    """A magic-2 batch at ``base``: records are (offset delta, timestamp, key, value, headers)."""
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 30)
    for delta, ts, key, value, headers in records:
        builder.append(delta, timestamp=ts, key=key, value=value, headers=headers)
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base)
    if attrs:
        struct.pack_into(">h", buf, ATTRIBUTES_AT, struct.unpack_from(">h", buf, ATTRIBUTES_AT)[0] | attrs)
    if last_delta is not None:
        struct.pack_into(">i", buf, LAST_DELTA_AT, last_delta)
    return bytes(buf)


def marker(offset: int) -> bytes:
    """A transaction commit marker: a control batch of one record."""
    return batch(offset, [(0, 1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])], attrs=0x30)


def reference(records: bytes, start: int, end: int) -> list[tuple]:
    """kafka-python's decoder: (offset, timestamp, value) of data records in [start, end)."""
    rows, mr = [], MemoryRecords(records)
    while (b := mr.next_batch()) is not None:
        if getattr(b, "is_control_batch", False):
            continue
        rows += [(r.offset, r.timestamp, r.value) for r in b if start <= r.offset < end]
    return [(o, t, None if v is None else v.decode("utf-8", "replace")) for o, t, v in rows]


def rows(records: bytes, start: int, end: int) -> list[tuple]:
    got = decode(records, start, end, "t-0")
    out = []
    for b in kafka_records.arrow_batches(got, "t", 0):
        d = b.to_pydict()
        out += zip(d["kafka_offset"], d["kafka_timestamp"], d["value"], strict=True)
        assert set(d["kafka_topic"]) == {"t"} and set(d["kafka_partition"]) == {0}
    return out


def random_value(rng: random.Random):
    kind = rng.randrange(8)
    if kind == 0:
        return None
    if kind == 1:
        return b""
    if kind == 2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 30)))  # mostly invalid UTF-8
    if kind == 3:
        return "".join(rng.choice('aé日😀\n"{') for _ in range(rng.randrange(1, 200))).encode()
    if kind == 4:
        return rng.choice([b"z" * 9_000, b"y" * 70_000])  # 2- and 3-byte record length varints
    return b'{"principal":"User:%d","producer_id":%d}' % (rng.randrange(9), rng.randrange(10**9))


def random_batches(rng: random.Random, codecs: list[int]) -> tuple[bytes, int]:
    out, base, t0 = [], 0, 1_767_225_600_000
    for i in range(12):
        n = rng.randrange(1, 40)
        deltas = sorted(rng.sample(range(n + rng.randrange(3)), n))  # gaps: compacted records
        recs = [
            (
                d,
                t0 + rng.choice([0, 5, -3, 2**21, -(2**40), rng.randrange(10**6)]),  # long varlongs too
                rng.choice([None, b"k", b"key" * 50]),
                random_value(rng),
                rng.choice([[], [("h", b"v")], [("a", b""), ("b", b"x" * 200)]]),
            )
            for d in deltas
        ]
        out.append(batch(base, recs, codec=codecs[i % len(codecs)]))
        base += deltas[-1] + 1
        if i % 4 == 3:
            out.append(marker(base))
            base += 1
    return b"".join(out), base


def available_codecs() -> list[int]:
    has = {"snappy": kafka_codec.has_snappy, "lz4": kafka_codec.has_lz4, "zstd": kafka_codec.has_zstd}
    return [0, 1] + [CODECS[c] for c, ok in has.items() if ok()]


@pytest.mark.parametrize("seed", range(4))
def test_random_batches_decode_like_kafka_python(seed):
    rng = random.Random(seed)
    records, end = random_batches(rng, available_codecs())
    for start, stop in [
        (0, end),
        (0, 10**9),
        (1, end - 1),
        (rng.randrange(end), end),
        (5, 6),
        (end, end + 5),
    ]:
        assert rows(records, start, stop) == reference(records, start, stop), (start, stop)


def test_a_value_over_a_mebibyte_and_a_huge_timestamp_delta():
    big = "ü".encode() * 700_000  # 1.4 MB: a 4-byte length varint
    records = batch(3, [(0, 10, None, b"a", []), (1, 10 + 2**35, b"k", big, []), (2, -5, None, b"b", [])])
    assert rows(records, 0, 99) == reference(records, 0, 99)
    assert [r[1] for r in rows(records, 0, 99)] == [10, 10 + 2**35, -5]


def test_the_position_passes_control_batches_and_compaction_gaps():
    data = batch(0, [(0, 1, None, b"a", []), (1, 1, None, b"b", [])], last_delta=4)  # 2..4 compacted away
    records = data + marker(5) + marker(6)
    got = decode(records, 0, 7)
    assert got.next_offset == 7 and got.rows == 2
    assert decode(marker(5), 5, 6).next_offset == 6  # a range that is only a marker
    gap = decode(data, 3, 5)  # a range inside the gap
    assert gap.next_offset == 5 and gap.rows == 0


def test_a_batch_cut_short_at_the_end_is_left_for_the_next_fetch():
    first = batch(0, [(0, 1, None, b"a", []), (1, 1, None, b"b", [])])
    second = batch(2, [(0, 1, None, b"c", [])])
    got = decode(first + second[:-3], 0, 10)
    assert got.next_offset == 2 and got.rows == 2 and got.complete_batches == 1
    assert decode(second[:20], 2, 10).complete_batches == 0  # nothing whole: fetch more bytes


def test_log_append_time_takes_the_batchs_max_timestamp():
    records = batch(0, [(0, 100, None, b"a", []), (1, 250, None, b"b", [])], attrs=0x08)
    assert [r[1] for r in rows(records, 0, 2)] == [250, 250]
    assert rows(records, 0, 2) == reference(records, 0, 2)


@pytest.mark.parametrize("magic,codec", [(0, 0), (1, 0), (1, 1)])
def test_legacy_message_sets(magic, codec):
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i, value in enumerate([b"x", None, b"\xff", "é".encode()]):
        builder.append(i + 10, timestamp=1_000 + i, key=b"k", value=value)
    legacy = bytes(builder.build())
    records = legacy + batch(14, [(0, 7, None, b"v2", [])])  # then a magic-2 batch
    for start, stop in [(10, 15), (11, 13), (14, 15)]:
        assert rows(records, start, stop) == reference(records, start, stop)
    assert decode(records, 10, 15).next_offset == 15


def test_a_codec_without_its_library_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(kafka_codec, "has_zstd", lambda: False)
    records = batch(40, [(0, 1, None, b"a", [])], attrs=4)
    with pytest.raises(KafkaError, match=r"t-0 offset 40 is compressed with zstd.*pip install zstandard"):
        decode(records, 40, 41, "t-0")


def test_a_corrupt_batch_is_a_clear_error():
    records = bytearray(batch(0, [(0, 1, None, b"abc", [])]))
    records[61] = 0x7E  # the record's length, far past the batch
    with pytest.raises(KafkaError, match="record batch of t-0 at offset 0 is corrupt"):
        decode(bytes(records), 0, 1, "t-0")


# -- the read loop, on a fake broker -----------------------------------------------------------
class FakeBroker:
    """Stands in for ``connection.Connection``: a log of batches from ``log_start``."""

    instances: list = []

    def __init__(self, options):
        self.options, self.closed, self.fetches = options, False, []
        self.log, self.log_start, self.exists = b"", 0, True
        self.log_end = 1_000  # the high watermark ListOffsets gives: past every range read here
        FakeBroker.instances.append(self)

    def leader(self, tp):
        return 0 if self.exists else None

    def refresh(self, timeout_ms=None):
        """Fresh metadata: :meth:`leader` then says whether the partition still exists."""

    def send(self, tp, node, offset, max_bytes):
        self.fetches.append((offset, max_bytes))
        return offset, max_bytes

    def receive(self, sent):
        offset, max_bytes = sent
        if offset < self.log_start:
            return SimpleNamespace(error_code=kafka_fetch.OFFSET_OUT_OF_RANGE, records=b"")
        return SimpleNamespace(error_code=0, records=self.log[: max_bytes if max_bytes < 1000 else None])

    def list_offset(self, tp, node, spec):
        return self.log_start if spec == -2 else self.log_end

    def close(self):
        self.closed = True


@pytest.fixture
def fake(monkeypatch):
    connection.close_idle()
    FakeBroker.instances = []
    monkeypatch.setattr(connection, "Connection", FakeBroker)
    yield FakeBroker
    connection.close_idle()


def read(start, end, **options):
    from pidquota.sources.kafka.source import KafkaRange, _lost

    opts = {"kafka.bootstrap.servers": "b:9092", "fetchtimeoutms": "300", **options}
    part = KafkaRange("t", 0, start, end, opts)
    return [r for b in kafka_fetch.read_range(part, _lost) for r in b.column("value").to_pylist()]


def test_one_connection_per_process_reused_and_closed_when_options_change(fake):
    read(0, 0)  # an empty range still leases
    read(0, 0)
    assert len(fake.instances) == 1 and not fake.instances[0].closed
    read(0, 0, **{"kafka.sasl.username": "other"})
    assert len(fake.instances) == 2 and fake.instances[0].closed and not fake.instances[1].closed


def test_a_failed_read_closes_its_connection(fake):
    with pytest.raises(KafkaError, match=r"no data from t-0 for 0.3 s .* is the broker up\?"):
        read(0, 5)  # the fake log is empty
    assert fake.instances[0].closed
    read(0, 0)
    assert len(fake.instances) == 2


def test_deleted_offsets_are_data_loss_unless_allowed(fake, monkeypatch):
    def with_log(options):
        broker = FakeBroker.__new__(FakeBroker)
        FakeBroker.__init__(broker, options)
        broker.log, broker.log_start = batch(3, [(0, 1, None, b"d", []), (1, 1, None, b"e", [])]), 3
        return broker

    monkeypatch.setattr(connection, "Connection", with_log)
    with pytest.raises(KafkaError, match=r"data loss: t-0 offsets 0..2 were deleted before they were read"):
        read(0, 5)
    assert read(0, 5, failondataloss="false") == ["d", "e"]


def test_a_log_that_ends_before_the_range_while_fetches_say_nothing_is_data_loss(fake, monkeypatch):
    """A topic deleted and created again, empty, under a planned range: the fetch at its
    offset answers no error and no records; the log's end says the range is gone (issue 43 §3)."""
    monkeypatch.setattr(FakeBroker, "list_offset", lambda self, tp, node, spec: 0)
    with pytest.raises(KafkaError, match=r"data loss: t-0 offsets 0..4 are past the log end 0"):
        read(0, 5, fetchtimeoutms="60000")
    assert read(0, 5, fetchtimeoutms="60000", failondataloss="false") == []


def test_a_vanished_partition_is_data_loss_unless_allowed(fake, monkeypatch):
    monkeypatch.setattr(FakeBroker, "leader", lambda self, tp: None)
    with pytest.raises(KafkaError, match=r"data loss: t-0 no longer exists"):
        read(0, 5)
    assert read(0, 5, failondataloss="false") == []


def test_a_partition_gone_while_its_fetches_say_nothing_is_data_loss_at_once(fake, monkeypatch):
    """A topic deleted mid-read whose fetches answer no error and no records (the broker still
    dropping it): fresh metadata says it is gone, long before the fetch timeout names the broker."""

    def gone_after_two(self, sent):
        if len(self.fetches) >= 2:
            self.exists = False  # what the next metadata refresh shows
        return SimpleNamespace(error_code=0, records=b"")

    def cached_leader(self, tp):  # the leader as the last metadata said it
        return 0 if getattr(self, "known", True) else None

    def refresh(self, timeout_ms=None):
        self.known = self.exists

    monkeypatch.setattr(FakeBroker, "receive", gone_after_two)
    monkeypatch.setattr(FakeBroker, "leader", cached_leader)
    monkeypatch.setattr(FakeBroker, "refresh", refresh)
    with pytest.raises(KafkaError, match=r"data loss: t-0 no longer exists"):
        read(0, 5, fetchtimeoutms="60000")
    assert read(0, 5, fetchtimeoutms="60000", failondataloss="false") == []


def test_a_batch_larger_than_the_fetch_size_grows_the_fetch(fake, monkeypatch):
    monkeypatch.setattr(kafka_fetch, "FETCH_BYTES", 64)  # the fake cuts responses below 1000 bytes
    big = batch(0, [(0, 1, None, b"x" * 500, [])])

    def with_big(options):
        broker = FakeBroker.__new__(FakeBroker)
        FakeBroker.__init__(broker, options)
        broker.log = big
        return broker

    monkeypatch.setattr(connection, "Connection", with_big)
    assert read(0, 1) == ["x" * 500]
    assert [m for _, m in FakeBroker.instances[0].fetches] == [64, 128, 256, 512, 1024]


def test_the_fetch_client_gets_the_security_options(monkeypatch):
    import kafka.net.compat

    from pidquota.store.kafka import fetch_client

    seen = {}

    class Client:
        def __init__(self, **kwargs):
            seen.update(kwargs)

        def get_broker_version(self, timeout_ms):
            raise kafka.errors.KafkaTimeoutError("no broker")

        def close(self):
            seen["closed"] = True

    monkeypatch.setattr(kafka.net.compat, "KafkaNetClient", Client)
    options = {
        "kafka.bootstrap.servers": "b1:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.username": "u",
        "kafka.sasl.password": "p",
    }
    with pytest.raises(KafkaError, match=r"cannot connect to Kafka at b1:9093: no broker answered"):
        fetch_client(options, request_timeout_ms=1000)
    assert seen["security_protocol"] == "SASL_SSL" and seen["sasl_plain_password"] == "p"
    assert seen["bootstrap_servers"] == ["b1:9093"] and seen["closed"]


# -- hostile bytes (issue 44): a corrupt response is a clear error, never another exception ----


@st.composite
def damaged(draw) -> bytes:
    """A few small batches (data, gzip, a marker, legacy), then cut, overwritten or spliced."""
    parts, base = [], 0
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["data", "gzip", "marker", "legacy"]))
        values = draw(st.lists(st.none() | st.binary(max_size=20), min_size=1, max_size=4))
        if kind == "legacy":
            builder = LegacyRecordBatchBuilder(draw(st.integers(0, 1)), 0, 1 << 20)
            for i, value in enumerate(values):
                builder.append(base + i, timestamp=1_000 + i, key=None, value=value)
            parts.append(bytes(builder.build()))
        elif kind == "marker":
            parts.append(marker(base))
        else:
            recs = [(i, 1_000 + i, None, v, []) for i, v in enumerate(values)]
            parts.append(batch(base, recs, codec=1 if kind == "gzip" else 0))
        base += len(values)
    buf = bytearray(b"".join(parts))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, max(0, len(buf) - 1)))
        how = draw(st.integers(0, 3))
        if how == 0 and buf:
            buf[at] = draw(st.integers(0, 255))
        elif how == 1 and len(buf) >= at + 4:  # a length, a count or a delta made negative or huge
            struct.pack_into(">i", buf, at, draw(st.sampled_from([-1, -12, -13, -61, 2**31 - 1, 0, 48])))
        elif how == 2:
            del buf[at:]
        else:
            buf[at:at] = draw(st.binary(max_size=40))
    return bytes(buf)


def _bounded(seconds: int):
    """A decoder that loops forever fails the example instead of hanging the suite."""

    def alarm(*_):
        raise TimeoutError(f"the decoder ran over {seconds} s: a loop that does not move on?")

    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)


@FAST
@given(damaged(), st.integers(0, 50), st.integers(0, 20_000))
def test_damaged_record_batches_are_a_clear_error_or_rows(records, start, length):
    end = start + length
    _bounded(10)
    try:
        for read in (
            lambda: list(kafka_records.arrow_batches(decode(records, start, end, "t-0"), "t", 0)),
            lambda: kafka_records.batch_headers(kafka_records.walk(records, start, end, None, "t-0")),
        ):
            try:
                read()
            except KafkaError as exc:
                assert "t-0" in str(exc) or "record batch" in str(exc)
    finally:
        signal.alarm(0)


def test_a_topic_kafka_python_forgot_is_gone_not_waited_for():
    """Issue 43 §3: kafka-python drops a topic its metadata no longer has; asking for it again
    fails with UnknownTopicOrPartitionError, which meant 'no answer' and a 10 s wait."""
    from kafka import TopicPartition
    from kafka.errors import UnknownTopicOrPartitionError
    from kafka.future import Future

    class Cluster:
        def add_topic(self, topic):
            return Future().failure(UnknownTopicOrPartitionError())

    conn = object.__new__(connection.Connection)
    conn.client = SimpleNamespace(cluster=Cluster())
    conn.options, conn.timeout_ms = {"kafka.bootstrap.servers": "b:9092"}, 1000
    assert conn.leader(TopicPartition("doomed", 0)) is None
