"""The parse's fast path (formats/events.py) certifies only what the strict parse accepts.

The Arrow-only tests pin which records the screen certifies; the Spark tests
run the screened path and the strict path over the fuzz corpus plus a list of
traps and require the same events (principal, PID, timestamp, epoch) and the
same dead letters (raw, reason, source), row for row.
"""

import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from harness import fuzz_corpus as fuzz
from pyspark.sql import functions as F

from pidquota.formats.events import LEAF_ROWS, Screen
from pidquota.formats.folded import client_column
from pidquota.quota.client import Client

LINES = pa.schema([("value", pa.binary()), ("source_file", pa.string())])
KAFKA = pa.schema([("value", pa.binary()), ("kafka_topic", pa.string()), ("kafka_timestamp", pa.int64())])
PLAIN = '{"timestamp": 1767225600000, "principal": "User:a", "producer_id": 7, "producer_epoch": 0}'
# Valid JSON events or near misses that the screen must leave to the strict parse.
TRAPS = [
    '{"timestamp": 5, "principal": "User:a", "producer_id": "7"}',
    '{"timestamp": 5, "principal": 42, "producer_id": 7}',
    '{"timestamp": 5.0, "principal": "User:a", "producer_id": 7}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 1e2}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 99999999999999999999}',
    '{"timestamp": 5, "principal": "User:a", "principal": "User:b", "producer_id": 7}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7, "x": 1, "x": 2}',
    '{"timestamp": 5, "principal": "User:\\u0061", "producer_id": 7}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7, "x": {"y": 1}}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7, "x": [1]}',
    '\ufeff{"timestamp": 5, "principal": "User:a", "producer_id": 7}',
    ' {"timestamp": 5, "principal": "User:a", "producer_id": 7}',
    '{"timestamp": 5, "principal": "   ", "producer_id": 7}',
    '{"timestamp": 5, "principal": "\u00e9\u00e9", "producer_id": 7}',
    '{"timestamp": 5, "principal": "' + "x" * 300 + '", "producer_id": 7}',
    '{"timestamp": 5, "principal": null, "producer_id": 7}',
    '{"timestamp": 5, "principal": "User:a"}',
    '{"timestamp": -1, "principal": "User:a", "producer_id": 7}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7, "producer_epoch": 32768}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7, "partition": -1}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7, "client_id": 3}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7,}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 07}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7} {}',
    '{"timestamp": 5, "principal": "User:a\tb", "producer_id": 7}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7, "x": NaN}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7, "x": -Infinity}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7, "x": Inf}',
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7, "x": 1' + "0" * 1000 + "}",
    '{"timestamp": 5, "principal": "User:a", "producer_id": 7, "' + "k" * 50_001 + '": 1}',
    b'{"timestamp": 5, "principal": "User:a\xff", "producer_id": 7}',
    b'{"timestamp": 5, "principal": "User:a\xc0\x80", "producer_id": 7}',
    b'{"timestamp": 5, "principal": "User:a\xed\xa0\x80", "producer_id": 7}',
    "{}",
    "",
]


def batch(lines, schema=LINES, kafka_ts=None):
    values = pa.array([x.encode() if isinstance(x, str) else x for x in lines], pa.binary())
    if schema is KAFKA:
        return pa.RecordBatch.from_arrays(
            [values, pa.array(["t"] * len(lines)), pa.array(kafka_ts)], schema=schema
        )
    return pa.RecordBatch.from_arrays([values, pa.array(["f"] * len(lines))], schema=schema)


def split(screen, b):
    """(certified sightings as (principal, pid, ts, epoch), unchecked raw values)."""
    seen, unchecked = [], []
    for out in screen([b]):
        for row in out.to_pylist():
            if row["check"]:
                unchecked.append(row["value"].decode("utf-8", "replace"))
            else:
                n = len(row["f_timestamps"])
                assert row["f_max_ts"] == max(row["f_timestamps"])
                seen += zip(  # noqa: B905
                    [row["f_principal"]] * n, row["f_producer_ids"], row["f_timestamps"], row["f_epochs"]
                )
    return Counter(seen), unchecked


def test_plain_events_are_certified_and_folded():
    screen = Screen(LINES, 256)
    lines = [PLAIN] * 3 + [PLAIN.replace('"producer_epoch": 0', '"client_id": "c"')]
    seen, unchecked = split(screen, batch(lines))
    assert seen == Counter({("User:a", 7, 1767225600000, 0): 3, ("User:a", 7, 1767225600000, -1): 1})
    assert unchecked == []


def test_each_pid_is_folded_with_its_least_client():
    """The fold lists each PID that names a client once, with the least of its identities:
    any split of a batch into partitions then agrees (the operator takes the least again)."""
    line = '{{"timestamp": 5, "principal": "User:a", "producer_id": {}, "client_id": "{}", "broker_id": {}}}'
    lines = [line.format(7, "app", 2), line.format(7, "app", 1), line.format(8, "other", 3), PLAIN]
    (out,) = [b for b in Screen(LINES, 256)([batch(lines)]) if b.num_rows]
    (row,) = out.to_pylist()
    assert sorted(zip(row["f_client_pids"], row["f_clients"], strict=True)) == [
        (7, Client("app", broker="1").joined()),
        (8, Client("other", broker="3").joined()),
    ]
    (row,) = next(Screen(LINES, 256)([batch([PLAIN])])).to_pylist()
    assert row["f_client_pids"] is None and row["f_clients"] is None  # nothing named: no lists


def test_a_separator_inside_a_field_never_shifts_the_columns():
    table = pa.table({"client_id": ["a\x1fb", None], "broker_id": pa.array([1, None], pa.int32())})
    assert client_column(table).to_pylist() == [Client("a b", broker="1").joined(), None]


@pytest.mark.parametrize("trap", TRAPS)
def test_every_trap_is_left_to_the_strict_parse(trap):
    """A trap among plenty of plain events: the plain ones stay certified, the trap is not."""
    lines = [PLAIN] * (3 * LEAF_ROWS) + [trap] + [PLAIN] * (3 * LEAF_ROWS)
    seen, unchecked = split(Screen(LINES, 256), batch(lines))
    assert (trap.decode("utf-8", "replace") if isinstance(trap, bytes) else trap) in unchecked
    assert sum(seen.values()) + len(unchecked) == len(lines)
    assert sum(seen.values()) >= 4 * LEAF_ROWS  # a refused block is narrowed down, not given up


def test_kafka_record_time_stands_in_for_a_missing_timestamp():
    no_ts = '{"principal": "User:a", "producer_id": 7}'
    seen, unchecked = split(Screen(KAFKA, 256), batch([no_ts, PLAIN], KAFKA, [42, 43]))
    assert seen == Counter({("User:a", 7, 42, -1): 1, ("User:a", 7, 1767225600000, 0): 1}) and not unchecked
    seen, unchecked = split(Screen(KAFKA, 256), batch([no_ts], KAFKA, [None]))
    assert unchecked == [no_ts]


# -- both paths through Spark ---------------------------------------------------------------


def _rows(spark, frame):
    """Unfolded sightings, dead letters and each PID's least client of a folded frame
    (``COMPACT_COLUMNS``)."""
    pdf = frame.toPandas()
    events, dead, clients = Counter(), Counter(), {}
    for r in pdf.itertuples():
        if r.dead is not None:
            d = json.loads(r.dead)
            dead[(d["raw"], d["reason"], d.get("source"))] += 1
        else:
            for p, t, e in zip(r.producer_ids, r.timestamps, r.epochs, strict=True):
                events[(r.principal, int(p), int(t), int(e))] += 1
            assert r.max_ts == max(r.timestamps)
            pids = r.client_pids if r.client_pids is not None else ()
            for p, c in zip(pids, r.clients if r.clients is not None else (), strict=True):
                key = (r.principal, int(p))
                clients[key] = min(clients.get(key, c), c)
    return events, dead, clients


def _compare(spark, lines_df):
    from pidquota.streaming.query import screened, strict

    fast_events, fast_dead, fast_clients = _rows(spark, screened(lines_df, 256))
    slow_events, slow_dead, slow_clients = _rows(spark, strict(lines_df, 256))
    assert fast_events == slow_events
    assert fast_dead == slow_dead
    assert fast_clients == slow_clients
    return fast_events, fast_dead


def test_screened_equals_strict_over_the_fuzz_corpus(spark):
    _, records = fuzz.corpus(936, 3000, 4000)
    values = [fuzz.as_bytes(line) for line, _ in records] + [fuzz.as_bytes(t) for t in TRAPS]
    rng = np.random.default_rng(5)
    files = [f"file-{k}" for k in rng.integers(0, 4, len(values))]
    df = spark.createDataFrame(list(zip(values, files, strict=True)), "value binary, source_file string")
    events, dead = _compare(spark, df.selectExpr("cast(value as string) value", "source_file").repartition(3))
    assert sum(events.values()) > 3000 and sum(dead.values()) > 4000


def test_spark_s_streaming_text_source_whose_columns_are_never_null_goes_through_the_screen(spark, tmp_path):
    """Spark's streaming text source declares ``_metadata.file_path`` NOT NULL;
    the screen nulls the line columns of the events it folds, so its output must say they
    may be null (Spark's generated code trusted NOT NULL and failed with a
    NullPointerException)."""
    from pidquota.streaming.query import screened

    _, records = fuzz.corpus(938, 300, 100)
    lines = [fuzz.as_bytes(line) for line, _ in records]
    lines += [  # plain events, which the screen folds (their line columns null)
        json.dumps(
            {"timestamp": 1_767_225_600_000 + i, "principal": f"User:{i % 7}", "producer_id": i}
        ).encode()
        for i in range(2000)
    ]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(
        b"\n".join(x for x in lines if b"\n" not in x and b"\r" not in x)
    )
    stream = spark.readStream.format("text").load(str(tmp_path / "in"))
    stream = stream.select("value", F.col("_metadata.file_path").alias("source_file"))
    assert not stream.schema["source_file"].nullable
    query = (
        screened(stream, 256)
        .writeStream.format("memory")
        .queryName("screened_text")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    batch = spark.read.text(str(tmp_path / "in")).select(
        "value", F.col("_metadata.file_path").alias("source_file")
    )
    want_events, want_dead = _compare(spark, batch)
    events, dead, _ = _rows(spark, spark.table("screened_text"))
    assert events == want_events and dead == want_dead
    assert sum(events.values()) > 2200 and sum(dead.values()) > 50


def test_screened_equals_strict_for_kafka_lines(spark):
    _, records = fuzz.corpus(937, 500, 500)
    lines = [fuzz.as_bytes(line) for line, _ in records]
    lines += [b'{"principal": "User:k", "producer_id": 9}'] * 5  # timestamp from the record
    rows = [(v, "t", i % 3, i, 1_767_225_600_000 + i) for i, v in enumerate(lines)]
    df = spark.createDataFrame(
        rows, "value binary, kafka_topic string, kafka_partition int, kafka_offset long, kafka_timestamp long"
    ).selectExpr(
        "cast(value as string) value", "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp"
    )
    events, _ = _compare(spark, df)
    assert sum(n for (p, *_), n in events.items() if p == "User:k") == 5
