"""A seeded fuzz run: no record, of any shape or size, fails the query (issue 9).

Over 10,000 malformed records of many kinds (truncated, wrong types, huge and
fractional numbers, BOMs, control characters, nesting thousands deep, very
long lines, binary junk) are mixed with valid events, read from a file and
from Kafka. Every record must come out as an event or a dead letter with the
specific reason its damage calls for, and the valid events' decisions must be
exactly those of the valid events run alone.
"""

import json
from collections import Counter

import pytest
from harness import fuzz_corpus as fuzz

SEED, N_VALID, N_BAD = 936, 3000, 10_000
QUOTAS = {"<default>": 50}
KEY = ["principal", "producer_id", "timestamp"]


@pytest.fixture(scope="module")
def corpus():
    return fuzz.corpus(SEED, N_VALID, N_BAD)


@pytest.fixture(scope="module")
def alone(corpus, spark, tmp_path_factory):
    from harness.enforcer import Enforcer

    events, _ = corpus
    return Enforcer(spark, tmp_path_factory.mktemp("alone"), QUOTAS).run(events)["decisions"]


def _decisions(frame):
    cols = [c for c in frame.columns if c != "batch_id"]
    return frame[cols].sort_values(KEY).reset_index(drop=True)


def check_accounted_for(out, records, alone, decoded=lambda line: line) -> None:
    dead, metrics = out["dead-letters"], out["metrics"]
    assert metrics.events.sum() + len(dead) == len(records)  # nothing lost, nothing invented
    assert dead.reason.notna().all()
    expected = {
        decoded(line): why for line, why in records if why is not None and not isinstance(line, bytes)
    }
    assert len(dead) == sum(why is not None for _, why in records)
    for raw, reason in zip(dead.raw, dead.reason, strict=True):
        if raw in expected:
            assert expected[raw] in reason, (raw[:100], reason)
    junk = Counter(reason for raw, reason in zip(dead.raw, dead.reason, strict=True) if raw not in expected)
    assert junk == Counter({fuzz.NOT_JSON: sum(isinstance(line, bytes) for line, _ in records)})
    assert _decisions(out["decisions"]).equals(_decisions(alone))


def test_fuzz_from_a_file(corpus, alone, make_enforcer, tmp_path):
    _, records = corpus
    out = make_enforcer(tmp_path, QUOTAS).run_lines([line for line, _ in records])
    assert len(out["decisions"]) > 100 and (out["decisions"].verdict == "THROTTLE").any()
    check_accounted_for(out, records, alone)


def test_fuzz_from_kafka(corpus, alone, kafka, make_enforcer, tmp_path):
    _, records = corpus
    # Kafka's default message.max.bytes is about 1 MB: leave out the one huge record.
    # An event without a timestamp takes its Kafka record's, so it is not malformed there.
    records = [
        (line, why)
        for line, why in records
        if len(fuzz.as_bytes(line)) < 500_000 and why != "missing required field 'timestamp'"
    ]
    # Kafka values keep their line breaks; trailing white space of any kind is still white space.
    records = [
        (line + "\r\n", None) if why is None and i % 7 == 0 else (line, why)
        for i, (line, why) in enumerate(records)
    ]
    kafka.produce("fuzz", [fuzz.as_bytes(line) for line, _ in records])
    out = make_enforcer(tmp_path, QUOTAS).run_kafka(f"kafka://{kafka.bootstrap}/fuzz")
    check_accounted_for(out, records, alone)


# Issue 44's hostile lines, each among good events: the poison pill (an array 5,000 deep inside
# an object, which the format guard re-read and failed on) and the six that were dead-lettered
# beside it, plus NUL bytes, invalid UTF-8 and a cut record.
GOOD = '{"timestamp": 1700000000000, "principal": "User:h", "producer_id": 1}'
HOSTILE = [
    ('{"principal": "User:a", "x": ' + "[" * 5000 + "]" * 5000 + "}", fuzz.TOO_NESTED),
    ("[" * 100_000, fuzz.TOO_NESTED),
    (GOOD.replace('"producer_id": 1', '"producer_id": ' + "9" * 5000), "field 'producer_id' is out of range"),
    (GOOD.replace('"producer_id": 1', '"producer_id": 1e400'), "field 'producer_id' must be an integer"),
    (GOOD.replace('"producer_id": 1', '"producer_id": NaN'), fuzz.NOT_JSON),
    (GOOD.replace('"User:h"', '"User:\x00h"'), fuzz.NOT_JSON),
    (GOOD[:40], fuzz.NOT_JSON),
    (GOOD.replace('"User:h"', '"User:h"}') + "\x00", "text after the object"),
]
# 30 MB: a string over Jackson's 20,000,000 characters, which Spark's JSON parser refuses
HUGE = (GOOD[:-1] + ', "pad": "' + "x" * 30_000_000 + '"}', fuzz.NOT_JSON)


def _hostile_accounted_for(out, alone, hostile) -> None:
    """Each hostile line is one dead letter whose reason says why; the good events' decisions
    are those of the good events alone."""
    reasons = list(out["dead-letters"].reason)
    assert len(reasons) == len(hostile), [r[:90] for r in reasons]
    for why in sorted((why for _, why in hostile), key=len, reverse=True):  # the most specific first
        match = next((r for r in reasons if why in r), None)
        assert match is not None, (why, reasons)
        reasons.remove(match)
    assert _decisions(out["decisions"]).equals(_decisions(alone))


def test_issue_44_hostile_lines_from_a_file_and_kafka(corpus, kafka, make_enforcer, tmp_path):
    """Through a file (the 30 MB line too) and a Kafka topic (Kafka's 1 MB limit leaves that
    one out). The run goes to its end: no exception escapes."""
    events = corpus[0][:500]
    good = [json.dumps(e) for e in events]
    lines = [HOSTILE[0][0], *good[:250], *(x for x, _ in HOSTILE[1:]), *good[250:]]
    alone = make_enforcer(tmp_path / "alone", QUOTAS).run(events)["decisions"]
    out = make_enforcer(tmp_path / "file", QUOTAS).run_lines([*lines, HUGE[0]])
    _hostile_accounted_for(out, alone, [*HOSTILE, HUGE])
    kafka.produce("hostile-44", [fuzz.as_bytes(x) for x in lines])
    out = make_enforcer(tmp_path / "kafka", QUOTAS).run_kafka(f"kafka://{kafka.bootstrap}/hostile-44")
    _hostile_accounted_for(out, alone, HOSTILE)
