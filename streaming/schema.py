"""The event and output schemas, defined once.

An event is one JSON object per produce request:

============== ======== ======== =========================================
field          type     required meaning
============== ======== ======== =========================================
timestamp      int64    yes      request time at the broker, ms since epoch
principal      string   yes      the Kafka principal, e.g. ``User:alice``
producer_id    int64    yes      the PID; -1 (any negative) = not idempotent
producer_epoch int16    no       the producer epoch (default -1)
client_id      string   no       the client.id
broker_id      int32    no       the broker that served the request
transactional_id string no       the transactional.id, if any
topic          string   no       a topic of the request
partition      int32    no       a partition of the request
============== ======== ======== =========================================
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pidquota.streaming.columns import CLIENT_COLUMNS, DECISION_ARRAYS

# (name, spark type, required, inclusive range or None)
EVENT_FIELDS: tuple[tuple[str, object, bool, tuple[int, int] | None], ...] = (
    ("timestamp", LongType(), True, (0, 253_402_300_799_999)),  # up to 9999-12-31
    ("principal", StringType(), True, None),
    ("producer_id", LongType(), True, None),
    ("producer_epoch", IntegerType(), False, (-1, 32_767)),
    ("client_id", StringType(), False, None),
    ("broker_id", IntegerType(), False, (0, 2**31 - 1)),
    ("transactional_id", StringType(), False, None),
    ("topic", StringType(), False, None),
    ("partition", IntegerType(), False, (0, 2**31 - 1)),
)
EVENT_TYPED = StructType([StructField(n, t, True) for n, t, _, _ in EVENT_FIELDS])
EVENT_TEXT = StructType([StructField(n, StringType(), True) for n, _, _, _ in EVENT_FIELDS])

# The output rows (decisions, metrics, dead letters, skipped counts) in one schema, ``kind``
# telling them apart; the operator emits OPERATOR_SCHEMA, which the sinks unfold into these.
OUTPUT_SCHEMA = StructType(
    [
        StructField("kind", StringType()),
        StructField("principal", StringType()),
        StructField("producer_id", LongType()),
        StructField("producer_epoch", IntegerType()),
        StructField("timestamp", LongType()),
        StructField("verdict", StringType()),
        StructField("throttle_time_ms", LongType()),
        StructField("tokens", DoubleType()),
        StructField("quota", DoubleType()),
        StructField("rate", DoubleType()),
        StructField("events", LongType()),
        StructField("admitted", LongType()),
        StructField("throttled", LongType()),
        StructField("passed", LongType()),
        StructField("ignored", LongType()),
        StructField("admitted_total", LongType()),
        StructField("throttled_total", LongType()),
        StructField("active_pids_estimate", LongType()),
        StructField("state_bytes", LongType()),
        StructField("layers", IntegerType()),
        StructField("quota_stale", BooleanType()),
        # Set by the sink on the driver, not the operator: throttle-state publishes
        # to Redis that failed so far in this run (0 without Redis).
        StructField("failed_publishes", LongType()),
        # Set by the sink too: the row only rebuilds state (its event time is before
        # --replay-until), and the run's pidquota.mode (enforce or shadow).
        StructField("replay", BooleanType()),
        StructField("mode", StringType()),
        StructField("raw", StringType()),
        StructField("reason", StringType()),
        StructField("source", StringType()),
        # Skipped input (the request log's other API keys, control batches): what, and how many.
        StructField("what", StringType()),
        StructField("count", LongType()),
        # Decisions: the PID's client; metrics: the batch's main client (pidquota.quota.client).
        *(StructField(name, StringType()) for name in CLIENT_COLUMNS),
    ]
)
OUTPUT_COLUMNS = tuple(f.name for f in OUTPUT_SCHEMA.fields)

# The stateful operator's own rows: the output's, and on a principal's metrics row its
# batch's verdicts as arrays (``d_`` + a decision column), which the sinks turn into
# decision rows in Arrow (``streaming/outputs/rows.py``): Python builds one row per
# principal, not one per verdict, and Spark collects one per principal too.
_DECISION_TYPES = {"admitted": BooleanType(), "client": StringType()}
OPERATOR_SCHEMA = StructType(
    [
        *OUTPUT_SCHEMA.fields,
        *(
            StructField(column, ArrayType(_DECISION_TYPES.get(name) or OUTPUT_SCHEMA[name].dataType))
            for name, column in DECISION_ARRAYS.items()
        ),
    ]
)
OPERATOR_COLUMNS = tuple(f.name for f in OPERATOR_SCHEMA.fields)

# Per-principal state: one versioned blob (PySpark 4.3 cannot take arrays here).
STATE_SCHEMA = StructType([StructField("blob", BinaryType())])
