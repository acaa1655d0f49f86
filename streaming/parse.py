"""Parse and validate raw JSON lines into events, or dead letters with a reason.

The record is parsed once into a Spark ``VARIANT``, which keeps each field's
real JSON type: ``"1000"`` (a string) and ``1000`` (a number) differ, as do
``42`` and ``"42"`` in a string field, which ``from_json`` would both accept.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from streaming.schema import EVENT_FIELDS, KIND_DEAD, KIND_EVENT

_INTEGER_TYPES = r"^(TINYINT|SMALLINT|INT|BIGINT)$"
_WHOLE_DECIMAL = r"^DECIMAL\([0-9]+,0\)$"  # an integer too large for int64


def _field_checks(
    v: Column, max_principal: int, fallback_ts: Column | None
) -> tuple[list[tuple[Column, Column]], dict[str, Column]]:
    checks: list[tuple[Column, Column]] = []
    values: dict[str, Column] = {}
    for name, spark_type, required, bounds in EVENT_FIELDS:
        sub = F.try_variant_get(v, f"$.{name}", "variant")
        kind = F.schema_of_variant(sub)
        absent = sub.isNull() | (kind == "VOID")  # missing, or JSON null
        shown = F.substring(F.to_json(sub), 1, 80)
        if required and not (name == "timestamp" and fallback_ts is not None):
            checks.append((absent, F.lit(f"missing required field '{name}'")))
        if spark_type.typeName() == "string":
            checks.append(
                (
                    ~absent & (kind != "STRING"),
                    F.concat(F.lit(f"field '{name}' must be a string, got "), shown),
                )
            )
            values[name] = F.try_variant_get(v, f"$.{name}", "string")
            continue
        value = F.try_variant_get(v, f"$.{name}", "bigint")
        values[name] = value
        checks.append(
            (
                ~absent & ~kind.rlike(_INTEGER_TYPES) & ~kind.rlike(_WHOLE_DECIMAL),
                F.concat(F.lit(f"field '{name}' must be an integer, got "), shown),
            )
        )
        out_of_range = value.isNull()
        if bounds is not None:
            out_of_range = out_of_range | (value < bounds[0]) | (value > bounds[1])
        span = f"{bounds[0]}..{bounds[1]}" if bounds else "int64"
        checks.append(
            (~absent & out_of_range, F.concat(F.lit(f"field '{name}' is out of range ({span}): "), shown))
        )
    if fallback_ts is not None:  # Kafka: an event without a timestamp takes its record's
        values["timestamp"] = F.coalesce(values["timestamp"], fallback_ts)
    principal = values["principal"]
    checks += [
        (F.trim(principal) == "", F.lit("principal is empty")),
        (F.length(principal) > max_principal, F.lit(f"principal is longer than {max_principal} characters")),
    ]
    return checks, values


def _source(lines: DataFrame) -> Column:
    """Where a record came from, for its dead letter: Kafka position or file."""
    if "kafka_offset" in lines.columns:
        return F.concat_ws("", "kafka_topic", F.lit("/"), "kafka_partition", F.lit("@"), "kafka_offset")
    if "source_file" in lines.columns:
        return F.col("source_file")
    return F.lit(None).cast("string")


def parse_events(lines: DataFrame, max_principal: int) -> DataFrame:
    """``value`` strings in; ``PARSED_COLUMNS`` out.

    Valid events have ``kind = 'E'``; everything else ``kind = 'D'`` with the
    raw text, the first reason found and the record's source. Nothing is
    dropped. With a ``kafka_timestamp`` column (the Kafka source), an event
    without a ``timestamp`` takes its record's timestamp.
    """
    fallback = F.col("kafka_timestamp") if "kafka_timestamp" in lines.columns else None
    parsed = lines.select(
        F.col("value").alias("raw"),
        F.try_parse_json("value").alias("v"),
        _source(lines).alias("source"),
        *([fallback.alias("kafka_timestamp")] if fallback is not None else []),
    )
    v = F.col("v")
    checks, values = _field_checks(v, max_principal, fallback)
    checks = [
        (F.col("raw").isNull() | (F.trim("raw") == ""), F.lit("empty record")),
        (v.isNull(), F.lit("not valid JSON")),
        (~F.schema_of_variant(v).startswith("OBJECT"), F.lit("not a JSON object")),
        (~F.rtrim("raw").endswith("}"), F.lit("not valid JSON (text after the object)")),
        *checks,
    ]
    reason = F.lit(None).cast("string")
    for cond, why in reversed(checks):
        reason = F.when(cond, why).otherwise(reason)
    checked = parsed.select(
        "raw",
        "source",
        reason.alias("reason"),
        *(values[n].alias(n) for n in ("principal", "producer_id", "timestamp")),
        values["producer_epoch"].alias("producer_epoch"),
    )
    ok = F.col("reason").isNull()
    return checked.select(
        F.when(ok, F.lit(KIND_EVENT)).otherwise(F.lit(KIND_DEAD)).alias("kind"),
        F.when(ok, F.col("principal")).otherwise(F.lit("")).alias("principal"),
        F.when(ok, F.col("producer_id")).alias("producer_id"),
        F.when(ok, F.coalesce(F.col("producer_epoch").cast("int"), F.lit(-1))).alias("producer_epoch"),
        F.when(ok, F.col("timestamp")).alias("timestamp"),
        F.when(~ok, F.col("raw")).alias("raw"),
        F.col("reason"),
        F.when(~ok, F.col("source")).alias("source"),
    )
