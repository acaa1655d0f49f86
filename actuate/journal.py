"""The actuator's journal: what pidquota changed on the cluster, and what was there
before, in a compacted Kafka topic on the cluster it changes. It outlives pidquota: a
restart, even after kill -9, reads it back and reconciles (``actuate/actuator.py``).

One record per control, keyed by the control: the principal it acts on, the operator's
value before pidquota (``before``: a quota's value or None, an ACL's presence), pidquota's
own (``ours``), and until when (``until_ms``, wall clock). A record is written *before*
the control is changed (write-ahead), so a crash between the two leaves a record whose
control still holds ``before``: the restart sees that. An undone control gets a tombstone.

Worked example: acting on ``User:alice`` with ``request_percentage`` 1 where the operator
had set 200 writes ``{"control": {"kind": "quota", "entity_type": "user", "entity":
"alice", "key": "request_percentage"}, "principal": "User:alice", "before": 200.0,
"ours": 1.0, "until_ms": ...}``, keyed by the control alone (the same JSON); the undo sets
200 back and writes a tombstone under that key.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass

from pidquota.actuate.controls import AclBinding, Control, QuotaKey
from pidquota.conf.errors import PidquotaError
from pidquota.store import kafka as kafka_store


class JournalError(PidquotaError):
    """The journal topic could not be read or written."""


SETTING, SET, UNDOING = "setting", "set", "undoing"


@dataclass(frozen=True)
class Entry:
    """One control pidquota holds: ``before`` the operator's value, ``ours`` pidquota's, until
    ``until_ms`` (wall clock), and how far the change got (``state``), each step journalled
    before it is made: ``setting`` (pidquota's value may not be on the cluster yet), ``set``
    (it is), ``undoing`` (the operator's may be back already).

    Worked example: a restart finds ``setting`` with the cluster at ``before``: a crash came
    between record and change, so pidquota sets it again. It finds ``set`` with the cluster at
    ``before``: the operator put their value back meanwhile, so pidquota leaves it."""

    control: Control
    principal: str
    before: float | bool | None
    ours: float | bool | None
    until_ms: int
    state: str = SET

    def to_json(self) -> bytes:
        kind = "quota" if isinstance(self.control, QuotaKey) else "acl"
        body = {**asdict(self), "control": {"kind": kind, **asdict(self.control)}}
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Entry:
        body = json.loads(raw)
        spec = dict(body.pop("control"))
        kind = spec.pop("kind")
        control = QuotaKey(**spec) if kind == "quota" else AclBinding(**spec)
        return cls(control=control, **body)


class Journal:
    """The journal topic (one partition, compacted), created if missing."""

    def __init__(self, options: dict, topic: str, timeout_ms: int = 30_000):
        self.options, self.topic, self.timeout_ms = options, topic, timeout_ms
        self._producer = None

    def ensure(self) -> None:
        """Create the topic (compacted, one partition, replicated up to 3) unless it exists."""
        from kafka.admin import NewTopic
        from kafka.errors import TopicAlreadyExistsError

        admin = kafka_store.admin(self.options, request_timeout_ms=self.timeout_ms)
        try:
            brokers = len(admin.describe_cluster().get("brokers", [])) or 1
            topic = NewTopic(
                self.topic,
                1,
                min(3, brokers),
                topic_configs={"cleanup.policy": "compact", "min.compaction.lag.ms": "0"},
            )
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([topic])
        except PidquotaError:
            raise
        except Exception as exc:  # kafka-python raises several kinds here
            raise JournalError(
                f"cannot create the journal topic {self.topic!r}: {type(exc).__name__}: {_short(exc)}; "
                "pidquota's principal needs CREATE, DESCRIBE, READ and WRITE on it (or create it, "
                "compacted, yourself): docs/enforcing.md"
            ) from None
        finally:
            admin.close()

    def load(self) -> dict[Control, Entry]:
        """Every live record: the last one per control, tombstones dropped."""
        from kafka import TopicPartition

        consumer = kafka_store.consumer(self.options, request_timeout_ms=self.timeout_ms)
        try:
            part = TopicPartition(self.topic, 0)
            consumer.assign([part])
            consumer.seek_to_beginning(part)
            end = consumer.end_offsets([part])[part]
            out: dict[Control, Entry] = {}
            deadline = time.monotonic() + self.timeout_ms / 1000
            while consumer.position(part) < end:
                if time.monotonic() > deadline:
                    raise JournalError(
                        f"the journal topic {self.topic!r} was not read to its end (offset {end}) "
                        f"within {self.timeout_ms / 1000:g} s; is every broker up?"
                    )
                for records in consumer.poll(timeout_ms=1000).values():
                    for record in records:
                        self._read(record, out)
            return out
        except PidquotaError:
            raise
        except Exception as exc:  # kafka-python raises several kinds here
            raise JournalError(
                f"cannot read the journal topic {self.topic!r}: {type(exc).__name__}: {exc}"
            ) from None
        finally:
            consumer.close()

    @staticmethod
    def _read(record, out: dict) -> None:
        entry = None if record.value is None else Entry.from_json(record.value)
        control = entry.control if entry else _control_of(record.key)
        if entry is None:
            out.pop(control, None)
        else:
            out[control] = entry

    def write(self, entry: Entry) -> None:
        self._send(entry.control, entry.to_json())

    def remove(self, control: Control) -> None:
        self._send(control, None)

    def _send(self, control: Control, value: bytes | None) -> None:
        try:
            if self._producer is None:
                self._producer = kafka_store.producer(self.options, request_timeout_ms=self.timeout_ms)
            self._producer.send(self.topic, key=_key(control), value=value).get(
                timeout=self.timeout_ms / 1000
            )
        except Exception as exc:  # kafka-python raises several kinds here
            raise JournalError(
                f"cannot write the journal topic {self.topic!r}: {type(exc).__name__}: {exc}"
            ) from None

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None


def _key(control: Control) -> bytes:
    kind = "quota" if isinstance(control, QuotaKey) else "acl"
    return json.dumps({"kind": kind, **asdict(control)}, sort_keys=True).encode()


def _control_of(key: bytes) -> Control:
    spec = json.loads(key)
    kind = spec.pop("kind")
    return QuotaKey(**spec) if kind == "quota" else AclBinding(**spec)


def _short(exc: Exception) -> str:
    """An exception's text on one line, without kafka-python's echo of the whole request."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:200] + "..."
