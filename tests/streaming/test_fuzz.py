"""A seeded fuzz run: no record, of any shape or size, fails the query (issue 9).

Over 10,000 malformed records of many kinds (truncated, wrong types, huge and
fractional numbers, BOMs, control characters, nesting thousands deep, very
long lines, binary junk) are mixed with valid events, read from a file and
from Kafka. Every record must come out as an event or a dead letter with the
specific reason its damage calls for, and the valid events' decisions must be
exactly those of the valid events run alone.
"""

from collections import Counter

import fuzz_corpus as fuzz
import pytest

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
