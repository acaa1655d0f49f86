"""The JSON events' strict parse, in Spark: raw lines into events, or dead letters with a reason
(the events format's ``strict``, for the lines its screen could not certify).

The record is parsed once into a Spark ``VARIANT``, which keeps each field's
real JSON type: ``"1000"`` (a string) and ``1000`` (a number) differ, as do
``42`` and ``"42"`` in a string field, which ``from_json`` would both accept.
"""

from __future__ import annotations

import functools

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pidquota.formats.events import EVENT_FIELDS
from pidquota.formats.folded import KIND_DEAD, KIND_EVENT
from pidquota.quota.client import COLUMNS as CLIENT_COLUMNS
from pidquota.quota.client import SEP

_INTEGER_TYPES = r"^(TINYINT|SMALLINT|INT|BIGINT)$"
_WHOLE_DECIMAL = r"^DECIMAL\([0-9]+,0\)$"  # an integer too large for int64
# An event is one flat object. A record with more brackets than this is never
# parsed: Spark's VARIANT functions recurse once per nesting level, and a
# record nested a few thousand deep overflows the executor's stack and fails
# the whole query (issue 9, item 14).
MAX_BRACKETS = 64
_BOM = "\ufeff"
_WHITESPACE = " \t\r\n"  # JSON's whitespace (RFC 8259)
# A principal made only of these is empty: white space, separators, control characters.
_BLANK = r"^[\s\p{Z}\p{Cc}]*$"
_INTEGER_FIELDS = [name for name, t, _, _ in EVENT_FIELDS if t != "string"]
# A field's number as written, e.g. `"producer_id": 5.0` -> 5.0. VARIANT stores
# 5.0 as the integer 5 (and 1e2 as a double), so only the text says whether an
# integer field was written with a fraction or exponent; it is read only for
# the rare rows whose VARIANT kind is not an integer type.
_LITERAL = r'(?<!\\)"{name}"\s*:\s*(-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)'
# Jackson refuses a number of more than 1000 digits as invalid JSON; name it instead.
_HUGE_NUMBER = r'(?<!\\)"(' + "|".join(_INTEGER_FIELDS) + r')"\s*:\s*-?[0-9]{1000}'


def _string_check(name: str, kind: Column, absent: Column, shown: Column):
    check = (~absent & (kind != "STRING"), F.concat(F.lit(f"field '{name}' must be a string, got "), shown))
    return [check], F.col(_VALUE.format(name))


def _integer_checks(name: str, bounds, text: Column, kind: Column, absent: Column, shown: Column):
    """An integer field: a JSON number written without fraction or exponent, within ``bounds``.

    ``5``, ``-1`` pass; ``"5"``, ``true``, ``5.5``, ``5.0`` and ``1e2`` are not integers;
    ``99999999999999999999`` and a 400-digit number are out of range.
    """
    value = F.col(_VALUE.format(name))
    span = f"{bounds[0]}..{bounds[1]}" if bounds else "int64"
    not_int = ~kind.rlike(_INTEGER_TYPES)
    literal = F.regexp_extract(text, _LITERAL.format(name=name), 1)
    whole = kind.rlike(_WHOLE_DECIMAL) | (kind == "DOUBLE")
    out_of_range = value.isNull()
    if bounds is not None:
        out_of_range = out_of_range | (value < bounds[0]) | (value > bounds[1])
    return [
        (
            ~absent & not_int & whole & literal.rlike("[.eE]"),
            F.concat(F.lit(f"field '{name}' must be an integer, got "), literal),
        ),
        (
            ~absent & (kind == "DOUBLE"),  # an integer literal past DECIMAL(38)
            F.lit(f"field '{name}' is out of range ({span}): the number is too large"),
        ),
        (
            ~absent & not_int & ~kind.rlike(_WHOLE_DECIMAL),
            F.concat(F.lit(f"field '{name}' must be an integer, got "), shown),
        ),
        (~absent & out_of_range, F.concat(F.lit(f"field '{name}' is out of range ({span}): "), shown)),
    ], value


# Each field, read from the record's VARIANT once, into columns of its own (its kind, value,
# absence and text); the checks refer to those columns, and are one CASE WHEN. Spark plans
# the strict parse anew in every micro-batch: as one tree that repeated each field's reads in
# every check, and nested a CASE WHEN per check, that took 612 ms a batch, now 334 ms
# (benchmarks/plan_cost.py; its optimized plan's text 20,858 characters, now 12,799).
_KIND, _VALUE, _ABSENT, _SHOWN = "_kind_{}", "_value_{}", "_absent_{}", "_shown_{}"


def _field_columns(v: Column) -> list[Column]:
    """Each field of ``v`` as its own columns: its VARIANT kind, its value, whether it is
    absent (missing, or JSON null) and its first 80 characters as JSON, for the messages."""
    columns = []
    for name, type_name, _, _ in EVENT_FIELDS:
        sub = F.try_variant_get(v, f"$.{name}", "variant")
        kind = F.schema_of_variant(sub)
        value = F.try_variant_get(v, f"$.{name}", "string" if type_name == "string" else "bigint")
        columns += [
            kind.alias(_KIND.format(name)),
            value.alias(_VALUE.format(name)),
            (sub.isNull() | (kind == "VOID")).alias(_ABSENT.format(name)),
            F.substring(F.to_json(sub), 1, 80).alias(_SHOWN.format(name)),
        ]
    return columns


def _field_checks(
    text: Column, max_principal: int, fallback_ts: Column | None
) -> tuple[list[tuple[Column, Column]], dict[str, Column]]:
    checks: list[tuple[Column, Column]] = []
    values: dict[str, Column] = {}
    for name, type_name, required, bounds in EVENT_FIELDS:
        kind, absent, shown = (F.col(c.format(name)) for c in (_KIND, _ABSENT, _SHOWN))
        if required and not (name == "timestamp" and fallback_ts is not None):
            checks.append((absent, F.lit(f"missing required field '{name}'")))
        if type_name == "string":
            more, values[name] = _string_check(name, kind, absent, shown)
        else:
            more, values[name] = _integer_checks(name, bounds, text, kind, absent, shown)
        checks += more
    if fallback_ts is not None:  # Kafka: an event without a timestamp takes its record's
        values["timestamp"] = F.coalesce(values["timestamp"], fallback_ts)
    principal = values["principal"]
    checks += [
        (principal.rlike(_BLANK), F.lit("principal is empty (only white space or control characters)")),
        (F.length(principal) > max_principal, F.lit(f"principal is longer than {max_principal} characters")),
    ]
    return checks, values


def _trailing(text: Column) -> Column:
    """Text after the first complete object that itself ends in ``}``, as in ``{...}}``
    or ``{...} {}``: the parser stops after the first value and would take it.
    Wrapped in ``[...]``, such a record is invalid or holds more than one value. A
    flat event has one ``}``, so the second parse runs only for records with more."""
    closers = F.length(text) - F.length(F.translate(text, "}", ""))
    wrapped = F.try_parse_json(F.concat(F.lit("["), text, F.lit("]")))
    more = wrapped.isNull() | F.try_variant_get(wrapped, "$[1]", "variant").isNotNull()
    return F.when(closers > 1, more).otherwise(F.lit(False))


# Where a record came from, for its dead letter: Kafka position, file, or nothing known.
_SOURCES = {
    "kafka": lambda: F.concat_ws(
        "", "kafka_topic", F.lit("/"), "kafka_partition", F.lit("@"), "kafka_offset"
    ),
    "file": lambda: F.col("source_file"),
    "": lambda: F.lit(None).cast("string"),
}


def _record_checks(v: Column, text: Column) -> list[tuple[Column, Column]]:
    """The whole record's checks, before its fields': empty, too nested, not JSON, not an
    object, text after the object."""
    trimmed = F.btrim(text, F.lit(_WHITESPACE))
    return [
        (F.col("raw").isNull() | (trimmed == ""), F.lit("empty record")),
        (
            F.col("too_nested"),
            F.lit(f"too many '{{' or '[' (more than {MAX_BRACKETS}): an event is one flat JSON object"),
        ),
        (
            v.isNull() & text.rlike(_HUGE_NUMBER),
            F.concat(
                F.lit("field '"),
                F.regexp_extract(text, _HUGE_NUMBER, 1),
                F.lit("' is out of range: a number of more than 1000 digits"),
            ),
        ),
        (v.isNull(), F.lit("not valid JSON")),
        (~trimmed.startswith("{"), F.lit("not a JSON object")),
        (~trimmed.endswith("}") | _trailing(text), F.lit("not valid JSON (text after the object)")),
    ]


def _client(values: dict[str, Column]) -> Column:
    """The event's client identity joined into one string (``pidquota.quota.client``), as
    ``formats/folded.py``'s ``client_column`` joins it; null when no field names one."""
    fields = {"broker": values["broker_id"].cast("string"), "client_id": values["client_id"]}
    fields["transactional_id"] = values["transactional_id"]
    cols = [fields.get(name, F.lit(None).cast("string")) for name in CLIENT_COLUMNS]
    known = F.lit(False)
    for c in cols:
        known = known | F.coalesce(c != "", F.lit(False))
    joined = F.concat_ws(SEP, *(F.coalesce(F.translate(c, SEP, " "), F.lit("")) for c in cols))
    return F.when(known, joined)


def _context_id() -> str:
    """The running SparkContext's application id: built columns are its JVM's objects."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    return context.applicationId if context is not None else ""


@functools.lru_cache(maxsize=8)
def _fields(context: str) -> tuple[Column, ...]:
    """:func:`_field_columns` of ``v``, built once per SparkContext (``context``)."""
    return tuple(_field_columns(F.col("v")))


@functools.lru_cache(maxsize=8)
def _judgement(max_principal: int, kafka: bool, context: str) -> tuple[Column, dict[str, Column], Column]:
    """The record's first failed check (its reason, null for an event), its fields' values and
    its client identity, over the columns ``v``, ``text``, the fields' own (:func:`_fields`) and
    ``kafka_timestamp`` for Kafka. Hundreds of calls into the JVM: built once per
    limit, input kind and SparkContext (``context``), then every query reuses them."""
    fallback = F.col("kafka_timestamp") if kafka else None
    v, text = F.col("v"), F.col("text")
    checks, values = _field_checks(text, max_principal, fallback)
    checks = [*_record_checks(v, text), *checks]
    reason = F.when(*checks[0])  # one CASE WHEN, the first check that fails (null: none)
    for cond, why in checks[1:]:
        reason = reason.when(cond, why)
    return reason, values, _client(values)


@functools.lru_cache(maxsize=16)
def _read_columns(source: str, kafka: bool, keep: tuple[str, ...], context: str) -> tuple[Column, ...]:
    """The first projection's columns: the raw value, its text without a byte order mark, whether
    it is too nested, its ``source`` (:data:`_SOURCES`: ``kafka``, ``file`` or none) and
    the ``keep`` columns; built once per shape and SparkContext (``context``), like
    :func:`_judgement`: every query of a session (a test's hundreds) reuses them."""
    # Bytes that are not UTF-8 (a binary record) become U+FFFD here: Arrow, which
    # carries every row to the Python operator, refuses invalid UTF-8 and would fail the query.
    value = F.make_valid_utf8(F.col("value"))
    # A UTF-8 byte order mark before the object is tolerated (a file saved by a Windows tool).
    text = F.when(value.startswith(_BOM), F.substring(value, 2, 2**31 - 1)).otherwise(value)
    brackets = F.length(text) - F.length(F.translate(text, "{[", ""))
    return (
        value.alias("raw"),
        text.alias("text"),
        (brackets > MAX_BRACKETS).alias("too_nested"),
        _SOURCES[source]().alias("source"),
        *([F.col("kafka_timestamp").alias("kafka_timestamp")] if kafka else []),
        *(F.col(k) for k in keep),
    )


@functools.lru_cache(maxsize=16)
def _judged_columns(
    max_principal: int, kafka: bool, keep: tuple[str, ...], context: str
) -> tuple[Column, tuple[Column, ...], tuple[Column, ...]]:
    """The parsed record column ``v``, the checked projection's columns and the output's, built
    once per shape and SparkContext (``context``), as :func:`_read_columns`."""
    reason, values, client = _judgement(max_principal, kafka, context)
    parsed = F.when(~F.col("too_nested"), F.try_parse_json("text")).alias("v")
    checked = (
        F.col("raw"),
        F.col("source"),
        reason.alias("reason"),
        *(values[n].alias(n) for n in ("principal", "producer_id", "timestamp")),
        values["producer_epoch"].alias("producer_epoch"),
        client.alias("client"),
        *(F.col(k) for k in keep),
    )
    ok = F.col("reason").isNull()
    out = (
        F.when(ok, F.lit(KIND_EVENT)).otherwise(F.lit(KIND_DEAD)).alias("kind"),
        F.when(ok, F.col("principal")).otherwise(F.lit("")).alias("principal"),
        F.when(ok, F.col("producer_id")).alias("producer_id"),
        F.when(ok, F.coalesce(F.col("producer_epoch").cast("int"), F.lit(-1))).alias("producer_epoch"),
        F.when(ok, F.col("timestamp")).alias("timestamp"),
        F.when(ok, F.col("client")).alias("client"),
        F.when(~ok, F.col("raw")).alias("raw"),
        F.col("reason"),
        F.when(~ok, F.col("source")).alias("source"),
        *(F.col(k) for k in keep),
    )
    return parsed, checked, out


def parse_events(lines: DataFrame, max_principal: int, keep: tuple[str, ...] = ()) -> DataFrame:
    """``value`` strings in; ``kind``, ``principal``, ``producer_id``, ``producer_epoch``,
    ``timestamp``, ``client``, ``raw``, ``reason``, ``source`` out, then the ``keep`` columns as
    they were.

    Valid events have ``kind = 'E'``; everything else ``kind = 'D'`` with the
    raw text, the first reason found and the record's source. Nothing is
    dropped. With a ``kafka_timestamp`` column (the Kafka source), an event
    without a ``timestamp`` takes its record's timestamp.
    """
    kafka, context, keep = "kafka_timestamp" in lines.columns, _context_id(), tuple(keep)
    source = "kafka" if "kafka_offset" in lines.columns else "file" if "source_file" in lines.columns else ""
    parsed, checked, out = _judged_columns(max_principal, kafka, keep, context)
    read = lines.select(*_read_columns(source, kafka, keep, context)).select("*", parsed)
    return read.select("*", *_fields(context)).select(*checked).select(*out)
