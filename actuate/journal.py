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
import logging
import math
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass, fields

from pidquota.actuate.controls import (
    AclBinding,
    ClientQuotaKey,
    ClientThrottleKey,
    Control,
    ControlError,
    Controls,
    QuotaKey,
    ThrottleKey,
)
from pidquota.actuate.mechanisms import deny_writes, is_ip, user_name
from pidquota.conf import jsontext
from pidquota.conf.errors import PidquotaError
from pidquota.conf.settings import principal_problem
from pidquota.store import kafka as kafka_store

log = logging.getLogger("pidquota.actuate")


class JournalError(PidquotaError):
    """The journal topic could not be read or written."""


class JournalFenced(JournalError):
    """Another run (or ``pidquota actuator lift``) claimed the journal: this one acts no more."""


class ForeignRecord(ValueError):
    """A journal record pidquota would not have written: skipped, never applied."""


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
        kind = _kind(self.control)
        body = {**asdict(self), "control": {"kind": kind, **asdict(self.control)}}
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Entry:
        """The entry a record holds, checked as strictly as pidquota writes it: the fields and
        their types, and a control that one of pidquota's mechanisms sets for that principal
        (:func:`fits`). Raises :class:`ForeignRecord` with the reason otherwise."""
        body = _object(raw, {f.name for f in fields(cls)})
        control = _control(body["control"])
        principal, state, until = body["principal"], body["state"], body["until_ms"]
        why = principal_problem(principal) if isinstance(principal, str) else None
        if why is not None:  # before issue 45, pidquota took User:* and User: as principals
            raise ForeignRecord(
                f"its principal is {why}: never undone by pidquota, since a crafted record "
                f"reads the same; if pidquota set {control.name}, undo it by hand (docs/enforcing.md)"
            )
        if not isinstance(principal, str) or not fits(control, principal):
            raise ForeignRecord(f"{control.name} is not a control pidquota sets for {principal!r}")
        if state not in (SETTING, SET, UNDOING):
            raise ForeignRecord(f"state {jsontext.brief(state)} is not setting, set or undoing")
        if isinstance(until, bool) or not isinstance(until, int) or until < 0:
            raise ForeignRecord(f"until_ms {jsontext.brief(until)} is not a time in ms")
        for name in ("before", "ours"):
            if not _value_fits(control, body[name]):
                raise ForeignRecord(f"{name} {jsontext.brief(body[name])} is not a value of {control.name}")
        return cls(control, principal, body["before"], body["ours"], until, state)


def fits(control: Control, principal: str) -> bool:
    """Whether ``control`` is one that a mechanism of pidquota's sets for ``principal``: the
    user's ``request_percentage``, an address's ``connection_creation_rate``, the closed loop's
    ``request_percentage`` of one of the user's client ids (or its ``<default>`` client), or one
    of deny-writes' three DENY bindings. Anything else in the journal (another quota key,
    another user's, an ALLOW, a wildcard principal) was not written by pidquota."""
    if principal_problem(principal) is not None:
        return False
    name = user_name(principal)
    if isinstance(control, QuotaKey):
        if control.entity_type == "user":
            return control == QuotaKey("user", name, "request_percentage")
        return (
            control.entity_type == "ip"
            and control.key == "connection_creation_rate"
            and is_ip(control.entity)
        )
    if isinstance(control, ThrottleKey):
        return control == ThrottleKey(principal)
    if isinstance(control, ClientThrottleKey):  # the plug-in's narrowed throttle
        return (
            control.principal == principal and isinstance(control.client_id, str) and control.client_id != ""
        )
    if isinstance(control, ClientQuotaKey):  # the closed loop's step (actuate/escalation.py)
        return control.user == name and control.key == "request_percentage" and control.client_id != ""
    return control in {binding for binding, _ in deny_writes().controls(principal)}


def _value_fits(control: Control, value) -> bool:
    if not isinstance(control, QuotaKey | ClientQuotaKey):  # an ACL or a plug-in throttle: present or not
        return isinstance(value, bool)
    if value is None:
        return True
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    )


def _object(raw: bytes, names: set[str]) -> dict:
    try:
        body = jsontext.loads(raw)
    except ValueError as exc:
        raise ForeignRecord(f"not JSON ({exc})") from None
    if not isinstance(body, dict) or set(body) != names:
        got = sorted(body) if isinstance(body, dict) else type(body).__name__
        raise ForeignRecord(f"not a journal entry: fields {got}, not {sorted(names)}")
    return body


_KINDS = {
    "quota": QuotaKey,
    "client-quota": ClientQuotaKey,
    "acl": AclBinding,
    "throttle": ThrottleKey,
    "client-throttle": ClientThrottleKey,
}
_MAY_BE_NONE = {ClientQuotaKey: {"client_id"}}  # a (user, client-id) quota's None: its <default> client


def _kind(control: Control) -> str:
    return next(k for k, cls in _KINDS.items() if isinstance(control, cls))


def _control(spec) -> Control:
    """A control from its JSON (a record's key, or its value's ``control``)."""
    if not isinstance(spec, dict) or spec.get("kind") not in _KINDS:
        raise ForeignRecord(f"control {jsontext.brief(spec)} is not a quota, an ACL or a plug-in throttle")
    kind = _KINDS[spec["kind"]]
    names = {f.name for f in fields(kind)}
    args = {k: v for k, v in spec.items() if k != "kind"}
    if set(args) != names or not all(
        isinstance(v, str) or (v is None and k in _MAY_BE_NONE.get(kind, ())) for k, v in args.items()
    ):
        raise ForeignRecord(
            f"control {jsontext.brief(spec, 80)} does not have the fields of a {spec['kind']}"
        )
    return kind(**args)


class Journal:
    """The journal topic (one partition, compacted), created if missing.

    One owner at a time: :meth:`claim` opens a transactional producer whose id is the topic's
    (``pidquota-journal-TOPIC``), and Kafka fences any earlier producer of that id, so a second
    run on the same journal (or ``pidquota actuator lift``) takes it over, and the first run's
    next write fails with :class:`JournalFenced` before it changes anything (each change is
    journalled first). The journal is read with read_committed, after the claim: the new owner
    sees every record the old one committed, so "the operator's value" is never read from a
    control pidquota itself holds. Without a claim (``status``) writes are plain."""

    def __init__(self, options: dict, topic: str, timeout_ms: int = 30_000, principal: str = ""):
        self.options, self.topic, self.timeout_ms = options, topic, timeout_ms
        self.principal = principal or own_principal(options)
        self._producer = None
        self._claimed = False  # the producer now is the claim's (transactional)
        self._owned = False  # claimed once: never written without a claim again (a fence is kept)
        self._stale = False  # a claimed write failed: the next write re-claims, if still the owner
        self._fenced: JournalFenced | None = None  # final: every later write raises it
        self._run = uuid.uuid4().hex  # this run, in the owner record its claim writes
        self._role = "run"  # or "lift" (pidquota actuator lift), in the owner record

    @property
    def owner_id(self) -> str:
        return f"pidquota-journal-{self.topic}"

    def claim(self, role: str = "run") -> None:
        """Become the journal's one writer: fences every earlier writer of this journal, and
        commits an owner record naming this run (what a re-claim checks: :meth:`_reclaim`).
        A claim that fails leaves the journal unclaimed: its next write claims again first."""
        self.close()
        self._owned, self._role = True, role
        producer = None
        try:
            producer = kafka_store.producer(
                self.options,
                request_timeout_ms=self.timeout_ms,
                transactional_id=self.owner_id,
                # longer than a transaction's bounded steps together (send, then commit), so that
                # the coordinator never aborts one of them: that would read as a fence
                transaction_timeout_ms=4 * self.timeout_ms,
            )
            kafka_store.bounded(producer.init_transactions, self._wait_s, f"claiming {self.owner_id}")
        except Exception as exc:  # kafka-python raises several kinds here
            if producer is not None:  # its sender must not go on trying to init (it would fence us)
                with contextlib.suppress(Exception):
                    producer.close(timeout=0)
            raise JournalError(
                f"cannot claim the journal topic {self.topic!r} (transactional id {self.owner_id}): "
                f"{type(exc).__name__}: {_short(exc)}; pidquota's principal needs WRITE and DESCRIBE on "
                "that transactional id: docs/enforcing.md"
            ) from None
        self._producer, self._claimed, self._stale = producer, True, False
        try:
            self._send(OWNER_KEY, json.dumps(self._owner_record(role)).encode())
        except JournalFenced:
            raise
        except JournalError as exc:  # a claim without its owner record would read as fenced later
            self.close()
            raise JournalError(f"cannot claim the journal topic {self.topic!r}: {exc}") from None

    def _owner_record(self, role: str = "run") -> dict:
        """Who claims: this run (``role`` run, or lift), when, and its host and process
        (``status`` asks whether it is still going)."""
        return {
            "run": self._run,
            "role": role,
            "at_ms": int(time.time() * 1000),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }

    def owner(self) -> dict | None:
        """The journal's last owner record (``run``, ``at_ms``, ``host``, ``pid``), or None."""
        owner = None
        try:
            for record in kafka_store.read_to_end(self.options, self.topic, self.timeout_ms):
                if record.key == OWNER_KEY and record.value is not None:
                    owner = record.value
        except PidquotaError as exc:
            raise JournalError(f"cannot check who owns the journal topic {self.topic!r}: {exc}") from None
        try:
            found = jsontext.loads(owner) if owner else None
        except ValueError:
            return None
        return found if isinstance(found, dict) else None

    def still_mine(self) -> bool:
        """Whether the journal's last owner record is this run's (no lift or other run took it
        over since); True when that cannot be read (the caller goes on as the owner)."""
        try:
            return (self.owner() or {}).get("run") == self._run
        except JournalError:
            return True

    @property
    def _wait_s(self) -> float:
        return 2 * self.timeout_ms / 1000

    def _reclaim(self) -> None:
        """After a claimed write failed without a fence (an outage), or a claim failed, the
        producer may be unusable or gone: claim again, but only while the journal's last owner
        record is this run's; another run's means it took the journal over:
        :class:`JournalFenced`. (A run whose owner check comes in the moment between another
        run's claim and that run's owner record fences the other instead, which then stops
        before it has changed anything: its start claims before it acts.)"""
        owner = self.owner()
        if (owner or {}).get("run") != self._run:
            raise self._fence()
        self.claim(self._role)  # as the first claim did

    def _fence(self) -> JournalFenced:
        """Fenced for good: the producer is closed, and every later write raises the same."""
        self.close()
        self._fenced = self._fenced or JournalFenced(
            f"another pidquota run (or `pidquota actuator lift`) took over the journal topic "
            f"{self.topic!r}: this run changes nothing more; the other holds and lifts what was set"
        )
        return self._fenced

    def ensure(self) -> None:
        """Create the topic (compacted, one partition, replicated up to 3) unless it exists;
        at creation, the ACLs of :meth:`guard_bindings`."""
        guard = self.guard_bindings() if self.principal else []
        ensure_compacted(self.options, self.topic, self.timeout_ms, guard, "the journal topic")

    def guard_bindings(self) -> list[AclBinding]:
        """The ACLs that leave the journal to pidquota's principal alone: under
        allow.everyone.if.no.acl.found=true, a resource with any ACL is closed to everyone the
        ACLs do not name (super users aside)."""
        p = self.principal
        return topic_bindings(p, self.topic) + [
            AclBinding(p, op, "ALLOW", "TRANSACTIONAL_ID", self.owner_id) for op in ("DESCRIBE", "WRITE")
        ]

    def load(self) -> dict[Control, Entry]:
        """Every live record: the last one per control, tombstones dropped."""
        try:
            records = kafka_store.read_to_end(self.options, self.topic, self.timeout_ms)
        except PidquotaError as exc:
            raise JournalError(f"cannot read the journal topic {self.topic!r}: {exc}") from None
        out: dict[Control, Entry] = {}
        for record in records:
            if record.key != OWNER_KEY:
                self._read(record, out)
        return out

    def _read(self, record, out: dict) -> None:
        """One record into ``out``. A record pidquota would not have written (see
        :meth:`Entry.from_json`; its key must be its control) is skipped with a warning:
        anyone who may write the topic could have put it there (docs/enforcing.md says who may)."""
        try:
            control = _control_of(record.key)
            entry = None if record.value is None else Entry.from_json(record.value)
            if entry is not None and entry.control != control:
                raise ForeignRecord(f"its key names {control.name}, its value {entry.control.name}")
        except ForeignRecord as exc:
            log.warning(
                "pidquota: journal %r offset %s skipped, not applied: %s", self.topic, record.offset, exc
            )
            return
        if entry is None:
            out.pop(control, None)
        else:
            out[control] = entry

    def write(self, entry: Entry) -> None:
        """Journal ``entry``; one its own reader would skip (:func:`fits`) is refused, never
        written: its control would then be set and never undone."""
        if not fits(entry.control, entry.principal):
            raise JournalError(f"{entry.control.name} is not a control pidquota sets for {entry.principal!r}")
        self._send(_key(entry.control), entry.to_json())

    def remove(self, control: Control) -> None:
        self._send(_key(control), None)

    def _send(self, key: bytes, value: bytes | None) -> None:
        """One record; claimed, in a transaction of its own, each step bounded in time (a
        broker gone mid-commit is an error, not a hang)."""
        from kafka.errors import ProducerFencedError

        if self._fenced is not None:
            raise self._fenced
        if self._owned and (self._stale or not self._claimed):  # never a plain write once claimed
            self._reclaim()
        try:
            if self._producer is None:
                self._producer = kafka_store.producer(self.options, request_timeout_ms=self.timeout_ms)
            if self._claimed:
                self._producer.begin_transaction()
            self._producer.send(self.topic, key=key, value=value).get(timeout=self.timeout_ms / 1000)
            if self._claimed:
                kafka_store.bounded(self._producer.commit_transaction, self._wait_s, "the journal's commit")
        except Exception as exc:  # kafka-python raises several kinds here
            if isinstance(exc, ProducerFencedError) or any(
                isinstance(a, ProducerFencedError) for a in exc.args
            ):
                raise self._fence() from None
            self._abort()
            raise JournalError(
                f"cannot write the journal topic {self.topic!r}: {type(exc).__name__}: {_short(exc)}"
            ) from None

    def _abort(self) -> None:
        """A failed transaction is aborted; the producer is then re-claimed before the next
        write (kafka-python leaves it unusable after some failures)."""
        if self._claimed and self._producer is not None:
            with contextlib.suppress(Exception):
                kafka_store.bounded(self._producer.abort_transaction, self._wait_s, "the journal's abort")
            self._stale = True

    def close(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.close(timeout=5)
            self._producer = None
        self._claimed = self._stale = False


OWNER_KEY = b'{"kind": "owner"}'  # the owner record's key: which run claimed the journal last


def _key(control: Control) -> bytes:
    kind = _kind(control)
    return json.dumps({"kind": kind, **asdict(control)}, sort_keys=True).encode()


def _control_of(key: bytes | None) -> Control:
    if key is None:
        raise ForeignRecord("a record without a key")
    try:
        spec = jsontext.loads(key)
    except ValueError as exc:
        raise ForeignRecord(f"its key is not JSON ({exc})") from None
    return _control(spec)


def topic_bindings(principal: str, topic: str) -> list[AclBinding]:
    """``principal`` alone may describe, read and write ``topic``, and read its configs (see
    :func:`ensure_compacted`)."""
    ops = (
        "DESCRIBE",
        "DESCRIBE_CONFIGS",
        "READ",
        "WRITE",
    )  # DESCRIBE_CONFIGS: its cleanup.policy, at each start
    return [AclBinding(principal, op, "ALLOW", "TOPIC", topic) for op in ops]


def ensure_compacted(options: dict, topic: str, timeout_ms: int, guard: list[AclBinding], what: str) -> None:
    """Create ``topic`` (compacted, one partition, replicated up to 3) unless it exists, and
    at its creation the ``guard`` ACLs (none: a warning that anyone the cluster lets write it
    may); refuse an existing topic that is not compacted. ``what`` names it in errors."""
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = kafka_store.admin(options, request_timeout_ms=timeout_ms)
    try:
        brokers = len(admin.describe_cluster().get("brokers", [])) or 1
        configs = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
        try:
            admin.create_topics([NewTopic(topic, 1, min(3, brokers), topic_configs=configs)])
        except TopicAlreadyExistsError:
            _check_one_partition(admin, topic, what)
            _check_compacted(admin, topic, what)
        else:
            guard_new_topic(options, topic, timeout_ms, guard, what)
    except PidquotaError:
        raise
    except Exception as exc:  # kafka-python raises several kinds here
        raise JournalError(
            f"cannot create {what} {topic!r}: {type(exc).__name__}: {_short(exc)}; "
            "pidquota's principal needs CREATE, DESCRIBE, READ and WRITE on it (or create it, "
            "compacted, yourself): docs/enforcing.md"
        ) from None
    finally:
        admin.close()


def guard_new_topic(
    options: dict, topic: str, timeout_ms: int, bindings: list[AclBinding], what: str
) -> None:
    """At the topic's creation: ACLs for pidquota's principal alone (docs/enforcing.md), or a
    warning that any principal the cluster lets write it may."""
    if not bindings:
        log.warning(
            "pidquota: %s %r is open to every principal the cluster lets write it: set "
            "pidquota.actuator.principal to pidquota's own (User:NAME), and it gets ACLs for it alone",
            what,
            topic,
        )
        return
    controls = Controls(options, timeout_ms=timeout_ms)
    try:
        for binding in bindings:
            controls.write(binding, True)
    except ControlError as exc:  # no ALTER on the cluster: the topic works, unguarded
        log.warning(
            "pidquota: %s %r got no ACLs (%s); add them by hand: %s",
            what,
            topic,
            exc,
            "; ".join(b.name for b in bindings),
        )
    finally:
        controls.close()


def _check_one_partition(admin, topic: str, what: str) -> None:
    """An existing topic must have one partition: pidquota writes and reads partition 0 alone
    (and the broker plug-in refuses nothing from a state topic of more), so records elsewhere
    would be unseen."""
    found = admin.describe_topics([topic])
    count = len(found[0].get("partitions") or []) if found else 0
    if count > 1:
        raise JournalError(
            f"{what} {topic!r} exists with {count} partitions, and pidquota writes and reads one: "
            f"delete it (pidquota makes it anew, compacted, with one), or name another topic"
        )


def _check_compacted(admin, topic: str, what: str) -> None:
    """An existing topic must be compacted: with delete, retention would take away records
    that say what pidquota holds, and nothing would undo them."""
    from kafka.admin import ConfigResource, ConfigResourceType

    found = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    policy = _config_value(found, topic, "cleanup.policy")
    if policy is None:  # DESCRIBE_CONFIGS on the topic refused, or an answer without it
        log.warning(
            "pidquota: %s %r: its cleanup.policy could not be read (pidquota's principal needs "
            "DESCRIBE_CONFIGS on the topic); it must be compact, or retention deletes what pidquota holds",
            what,
            topic,
        )
    elif "compact" not in policy.split(","):
        raise JournalError(
            f"{what} {topic!r} exists with cleanup.policy={policy}, not compact: retention "
            f"would delete what pidquota holds. Set it (kafka-configs.sh --alter --entity-type topics "
            f"--entity-name {topic} --add-config cleanup.policy=compact), or name another topic"
        )


def own_principal(options: dict) -> str:
    """pidquota's principal as Kafka names it, when the client options say: a SASL PLAIN or
    SCRAM login is ``User:<username>``; anything else (TLS names, Kerberos, OAuth) is not
    known from here: ""."""
    protocol = str(options.get("kafka.security.protocol") or "PLAINTEXT").upper()
    mechanism = str(options.get("kafka.sasl.mechanism") or "").upper()
    user = options.get("kafka.sasl.username")
    if protocol.startswith("SASL_") and user and (mechanism == "PLAIN" or mechanism.startswith("SCRAM")):
        return f"User:{user}"
    return ""  # a SASL login left in the settings of a PLAINTEXT run names no one


def login_principal(options: dict) -> str:
    """The principal the client options log in as, by Kafka's default principal builder:
    ``User:ANONYMOUS`` on PLAINTEXT, :func:`own_principal` otherwise ("" where not known)."""
    protocol = str(options.get("kafka.security.protocol") or "PLAINTEXT").upper()
    return "User:ANONYMOUS" if protocol == "PLAINTEXT" else own_principal(options)


def login_mismatch(given: str, options: dict) -> str | None:
    """What is wrong when ``pidquota.actuator.principal`` (``given``) is not the principal the
    client options log in as, by Kafka's default principal builder: a PLAINTEXT listener names
    every client ``User:ANONYMOUS``, a SASL PLAIN or SCRAM login ``User:<username>``; TLS
    names and other logins are not known from here (None). The ACLs pidquota gives its topics
    name ``given``, so a run that is someone else reads and writes them only as a super user.
    Example: the principal ``User:pidquota`` on ``PLAINTEXT`` -> one line naming
    ``User:ANONYMOUS`` and both fixes."""
    given = (given or "").strip()
    login = login_principal(options)
    if login == "User:ANONYMOUS":
        how = "a PLAINTEXT listener authenticates no one"
    else:
        how = f"its SASL {str(options.get('kafka.sasl.mechanism')).upper()} login"
    if not given or not login or given == login:
        return None
    fix = (
        "Connect through a PLAINTEXT listener (pidquota.kafka.security.protocol=PLAINTEXT)"
        if given == "User:ANONYMOUS"
        else f"Log in as {given} (pidquota.kafka.security.protocol, pidquota.kafka.sasl.mechanism, "
        "pidquota.kafka.sasl.username and PIDQUOTA_KAFKA_SASL_PASSWORD)"
    )
    return (
        f"pidquota.actuator.principal is {given}, but this run connects as {login} ({how}): the ACLs "
        f"pidquota gives its topics let {given} in, not this run, unless it is a super user. {fix}, or "
        f"set pidquota.actuator.principal={login}"
    )


def _config_value(found: dict, name: str, key: str) -> str | None:
    """One config's value from kafka-python's ``describe_configs`` answer
    (``{"topic": {NAME: {KEY: {"value": ...}}}}``)."""
    config = found.get("topic", {}).get(name, {}).get(key)
    return config.get("value") if isinstance(config, dict) else None


def _short(exc: Exception) -> str:
    """An exception's text on one line, without kafka-python's echo of the whole request."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:200] + "..."
