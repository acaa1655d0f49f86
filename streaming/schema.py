"""The output and state schemas, defined once (an input event's fields are
``pidquota.formats.events.EVENT_FIELDS``)."""

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

from pidquota.streaming.columns import CLIENT_COLUMNS, DECISION_ARRAYS, PACKED, SEEN_ADDRESSES

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
# batch's verdicts, packed (``d_`` + a decision column, ``columns.PACKED``), which the sinks turn into
# decision rows in Arrow (``streaming/outputs/rows.py``): Python builds one row per
# principal, not one per verdict, and Spark collects one per principal too.
OPERATOR_SCHEMA = StructType(
    [
        *OUTPUT_SCHEMA.fields,
        *(
            StructField(column, BinaryType() if name in PACKED else ArrayType(StringType()))
            for name, column in DECISION_ARRAYS.items()
        ),
        StructField(SEEN_ADDRESSES, ArrayType(StringType())),
    ]
)
OPERATOR_COLUMNS = tuple(f.name for f in OPERATOR_SCHEMA.fields)

# Per-principal state: one versioned blob (PySpark 4.3 cannot take arrays here).
STATE_SCHEMA = StructType([StructField("blob", BinaryType())])
