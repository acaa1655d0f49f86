"""The journal's one owner when Kafka fails it (review of issue 45 §1): a commit that gets no
answer is an error within its bound, never a hang; after a failed write the run claims the
journal again only while the journal's last owner record is its own; a run that another
took the journal from is fenced, and changes nothing more. The real broker's fencing is
tests/actuate/test_actuator.py."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest
from kafka.errors import KafkaTimeoutError, ProducerFencedError

from pidquota.actuate import journal as journal_module
from pidquota.actuate.controls import QuotaKey
from pidquota.actuate.journal import OWNER_KEY, SET, Entry, Journal, JournalError, JournalFenced

ENTRY = Entry(
    QuotaKey("user", "crash", "request_percentage"), "User:crash", None, 1.0, 1_800_000_000_000, SET
)


class Topic:
    """The journal topic: the committed records, and what the next steps do (``hang`` a commit,
    ``fail`` a send)."""

    def __init__(self):
        self.committed: list[tuple[bytes, bytes | None]] = []
        self.claims = 0
        self.hang = threading.Event()
        self.fail: list[Exception] = []
        self.fail_init: list[Exception] = []
        self.plain = 0  # records sent without a transaction

    def owner(self) -> str | None:
        runs = [json.loads(v)["run"] for k, v in self.committed if k == OWNER_KEY]
        return runs[-1] if runs else None


class Producer:
    def __init__(self, topic: Topic, transactional_id=None):
        self.topic, self.pending = topic, []
        self.transactional = transactional_id is not None

    def init_transactions(self):
        if self.topic.fail_init:
            raise self.topic.fail_init.pop(0)
        self.topic.claims += 1

    def begin_transaction(self):
        self.pending = []

    def send(self, name, key=None, value=None):
        if self.topic.fail:
            raise self.topic.fail.pop(0)
        if not self.transactional:
            self.topic.plain += 1
            self.topic.committed.append((key, value))
        else:
            self.pending.append((key, value))
        return SimpleNamespace(get=lambda timeout: None)

    def commit_transaction(self):
        if self.topic.hang.is_set():
            time.sleep(3600)  # a broker gone mid-commit: kafka-python waits without end
        self.topic.committed += self.pending

    def abort_transaction(self):
        self.pending = []

    def close(self, timeout=None):
        pass


@pytest.fixture
def topic(monkeypatch):
    topic = Topic()
    monkeypatch.setattr(
        journal_module.kafka_store,
        "producer",
        lambda options, transactional_id=None, **kw: Producer(topic, transactional_id),
    )
    monkeypatch.setattr(
        journal_module.kafka_store,
        "read_to_end",
        lambda options, name, timeout_ms: [
            SimpleNamespace(key=k, value=v, offset=0) for k, v in topic.committed
        ],
    )
    return topic


def test_a_commit_without_an_answer_is_an_error_within_its_bound(topic):
    journal = Journal({}, "j", timeout_ms=200)  # the bound: twice the request timeout
    journal.claim()
    topic.hang.set()
    t0 = time.monotonic()
    with pytest.raises(JournalError, match="the journal's commit got no answer within 0.4 s"):
        journal.write(ENTRY)
    assert time.monotonic() - t0 < 5


def test_after_a_failed_write_the_owner_claims_again_and_writes(topic):
    journal = Journal({}, "j")
    journal.claim()
    assert topic.claims == 1 and topic.owner() == journal._run
    topic.fail = [KafkaTimeoutError("no answer")]  # an outage
    with pytest.raises(JournalError, match="cannot write the journal topic 'j'") as failed:
        journal.write(ENTRY)
    assert not isinstance(failed.value, JournalFenced)
    journal.write(ENTRY)  # the outage is over: claimed again (still the owner), then written
    assert topic.claims == 2 and topic.committed[-1] == (journal_module._key(ENTRY.control), ENTRY.to_json())


def test_after_a_failed_write_a_run_that_lost_the_journal_is_fenced_and_writes_nothing(topic):
    first = Journal({}, "j")
    first.claim()
    topic.fail = [KafkaTimeoutError("no answer")]
    with pytest.raises(JournalError):
        first.write(ENTRY)
    Journal({}, "j").claim()  # meanwhile another run took the journal over
    before = list(topic.committed)
    with pytest.raises(JournalFenced, match="took over the journal topic 'j'"):
        first.write(ENTRY)
    assert topic.committed == before and topic.claims == 2  # no claim back: the other run keeps it


def test_a_fence_the_broker_names_is_final(topic):
    journal = Journal({}, "j")
    journal.claim()
    topic.fail = [ProducerFencedError()]
    with pytest.raises(JournalFenced):
        journal.write(ENTRY)
    assert topic.claims == 1  # not claimed again: another run holds it


def test_a_claim_whose_owner_record_is_not_written_fails(topic):
    topic.fail = [KafkaTimeoutError("no answer")]
    with pytest.raises(JournalError, match="cannot claim the journal topic 'j'"):
        Journal({}, "j").claim()


def test_a_fenced_journal_stays_fenced_and_never_writes_plain(topic):
    """Review of issue 45: a fenced journal closed its producer, and its next write went out
    plain (no transaction, no fence), so the next control was set unjournalled for the new owner."""
    journal = Journal({}, "j")
    journal.claim()
    topic.fail = [ProducerFencedError()]
    with pytest.raises(JournalFenced):
        journal.write(ENTRY)
    before = list(topic.committed)
    for _ in range(2):
        with pytest.raises(JournalFenced):
            journal.write(ENTRY)
    assert topic.committed == before and topic.plain == 0 and topic.claims == 1


def test_a_claim_again_that_fails_is_tried_again_and_never_writes_plain(topic):
    journal = Journal({}, "j")
    journal.claim()
    topic.fail = [KafkaTimeoutError("no answer")]  # an outage: the next write claims again
    with pytest.raises(JournalError):
        journal.write(ENTRY)
    topic.fail_init = [KafkaTimeoutError("no coordinator")]  # and that claim fails too
    with pytest.raises(JournalError, match="cannot claim"):
        journal.write(ENTRY)
    journal.write(ENTRY)  # the outage over: claimed, then written in a transaction
    assert topic.plain == 0 and topic.claims == 2
    assert topic.committed[-1] == (journal_module._key(ENTRY.control), ENTRY.to_json())
