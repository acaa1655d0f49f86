"""Every reader of input lines against hostile lines (issue 44), as properties: the sniffer
and the format guard, the screen (Arrow), the request log's screen and its shipper envelope,
and Spark's strict parse. The rule: every line comes out as an event, a dead letter with its
reason, or a counted skip; nothing raises (the format guard may raise its own InputError).

The strategies are ``harness/hostile.py``'s."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from harness.hostile import FAST, FEW_JOBS, SLOW, as_bytes, as_text, hostile_text
from hypothesis import given
from hypothesis import strategies as st

import pidquota.formats as formats
import pidquota.formats.recognise as sniff
from pidquota.conf.errors import InputError
from pidquota.conf.loader import load
from pidquota.formats.events import Screen
from pidquota.formats.plugin_inits import record_lines
from pidquota.formats.request_log import Options, RequestLogJudge
from pidquota.traffic import request_log as rl

EVENTS = [
    '{"timestamp": 1767225600000, "principal": "User:a", "producer_id": 7, "producer_epoch": 0}',
    '{"timestamp": 1767225600001, "principal": "User:b", "producer_id": 8, "client_id": "c", "broker_id": 2}',
]
EVENT_FIELDS = ["timestamp", "principal", "producer_id", "producer_epoch", "client_id", "broker_id", "x"]
events = st.lists(st.sampled_from(EVENTS) | hostile_text(EVENTS, EVENT_FIELDS), min_size=1, max_size=30)


def _request_line(pid: int) -> str:
    req, resp = rl.init_producer_id(4, None, 0, pid, 0)
    return rl.request_line(1_767_225_600_000, rl.INIT_PRODUCER_ID, 4, req, resp, "User:a", "app")


REQUEST = _request_line(4000)
BODY = REQUEST[REQUEST.index("{") : REQUEST.rindex("}") + 1]
SHIPPED = json.dumps({"message": REQUEST, "host": {"name": "b1"}})


@st.composite
def request_lines(draw) -> str | bytes:
    """A request-log line with a hostile JSON body, a hostile shipper envelope, or a hostile
    line of any shape."""
    kind = draw(st.integers(0, 2))
    if kind == 0:  # the request's JSON replaced, field by field, by hostile JSON
        body = draw(hostile_text([BODY], ["requestHeader", "response", "principal", "clientInformation"]))
        return REQUEST.replace(BODY, as_text(body))
    if kind == 1:
        return draw(hostile_text([SHIPPED], ["message", "host", "log", "@timestamp"]))
    return draw(hostile_text([BODY], ["response"]))


LINE_FORMATS = [f.entry.name for f in formats.every() if f.reads == "lines"]
CSV = ["User:a,7,1767225600000", '"User:CN=a,O=b",8,1767225600001,0,app', "principal,producer_id,timestamp"]
any_line = (
    st.sampled_from(EVENTS + CSV + [REQUEST, SHIPPED])
    | hostile_text(EVENTS, EVENT_FIELDS)
    | request_lines()
    | st.text(max_size=300)
    | st.binary(max_size=300)
    | st.lists(
        st.sampled_from(["User:a", "7", "-1", "", '"', '""', "1767225600000", "x" * 300]), max_size=7
    ).map(",".join)
)


@FAST
@given(st.lists(any_line, min_size=1, max_size=30), st.sampled_from(LINE_FORMATS))
def test_every_line_formats_screen_accounts_for_every_line_and_raises_on_none(lines, name):
    """Each registered format's screen (pidquota.formats) over lines of every shape: every line
    is a sighting, a line left to the strict parse, a dead letter with a reason, or a count. (The
    plug-in's records hold a line per init: each of a record's lines is accounted for.)"""
    fmt = formats.get(name)
    batch = _batch(lines)
    seen = 0
    for out in fmt.screen(batch.schema, 256, fmt.options(load(None, {}))).screen(batch):
        for row in out.to_pylist():
            if row["check"]:
                seen += 1
            elif row["f_dead"]:
                judged = json.loads(row["f_dead"])
                seen += sum(judged["skipped"].values()) if "skipped" in judged else bool(judged["reason"])
            else:
                seen += len(row["f_timestamps"])
    if name == "plugin-inits":
        assert seen == len(record_lines([as_bytes(x) for x in lines]))
    else:
        assert seen == len(lines)


@FAST
@given(st.lists(any_line, min_size=1, max_size=30), st.sampled_from(LINE_FORMATS))
def test_the_sniffer_and_the_format_guard_never_fail_on_a_line(lines, fmt):
    head = b"\n".join(as_bytes(x) for x in lines)
    assert sniff.kind_of(head[: sniff.HEAD]) in ("gzip", "binary", "text", *LINE_FORMATS)
    guard = sniff.FormatGuard(fmt, "the test's input")
    try:
        guard.add([as_text(x) for x in lines], len(lines), skipped={"not-a-request": len(lines)})
    except InputError as exc:
        assert "the test's input" in str(exc)


def _batch(lines) -> pa.RecordBatch:
    values = pa.array([as_bytes(x) for x in lines], pa.binary())
    return pa.RecordBatch.from_arrays([values, pa.array(["f"] * len(lines))], ["value", "source_file"])


@FAST
@given(events)
def test_the_screen_certifies_or_hands_on_every_line(lines):
    certified = unchecked = 0
    for out in Screen(_batch(lines).schema, 256)([_batch(lines)]):
        for row in out.to_pylist():
            if row["check"]:
                unchecked += 1
            else:
                certified += len(row["f_timestamps"])
    assert certified + unchecked == len(lines)


@FAST
@given(st.lists(request_lines() | st.just(REQUEST) | st.just(SHIPPED), min_size=1, max_size=20))
def test_the_request_log_screen_judges_every_line(lines):
    values = pa.array([as_bytes(x) for x in lines], pa.binary())
    out = RequestLogJudge(Options(), 256).judge(values, ["f"] * len(lines), [None] * len(lines))
    assert len(out.events) + len(out.dead) + sum(out.skipped.values()) == len(lines)
    assert all(d["reason"] for d in out.dead)


@pytest.mark.spark
@FEW_JOBS
@given(
    st.lists(
        st.lists(
            st.sampled_from(EVENTS) | hostile_text(EVENTS, EVENT_FIELDS, huge=(100_000,)),
            min_size=1,
            max_size=30,
        ),
        min_size=SLOW.max_examples,
        max_size=SLOW.max_examples,
    )
)
def test_the_strict_parse_judges_every_line(spark, examples):
    """Spark's strict parse and the screen together: each line an event or a dead letter with
    a reason, the same on both paths. (Lines of at most 100 kB: the test JVM's heap takes 30
    of them through createDataFrame; the 30 MB line goes through a file in test_fuzz.) Each
    example draws 12 lists of lines, each line tagged with its list, and judges them in one
    Spark job per path: 2 examples (Hypothesis' first is its simplest) judge 24 lists in 4
    jobs, where 12 examples of one list each took 24 jobs (44 s alone, now 13 s)."""
    from pyspark.sql import functions as F

    from pidquota.streaming.query import screened, strict

    rows = [(as_bytes(x), f"example-{k}") for k, lines in enumerate(examples) for x in lines]
    df = spark.createDataFrame(rows, "value binary, source_file string").select(
        F.col("value").cast("string").alias("value"), "source_file"
    )
    counted = []
    for frame in (screened(df, 256), strict(df, 256)):
        pdf = frame.toPandas()
        dead = [json.loads(d) for d in pdf["dead"].dropna()]
        assert all(d["reason"] for d in dead)
        events = sum(len(p) for p in pdf.loc[pdf["dead"].isna(), "producer_ids"])
        counted.append((events, sorted((d["source"], d["raw"], d["reason"]) for d in dead)))
        assert events + len(dead) == len(rows)
    assert counted[0] == counted[1]
