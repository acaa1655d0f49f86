"""The broker request log as input (``--input-format kafka-request-log``): its granted
INIT_PRODUCER_ID lines become events, everything else is counted and dropped first.

With ``kafka.request.logger`` at DEBUG, every broker writes one line per completed
request (KIP-673, Kafka 2.8 to 4.x; log4j's ``[%d] %p %m (%c)%n``)::

    [2026-11-24 13:00:00,123] DEBUG Completed request:{"isForwarded":false,
    "requestHeader":{"requestApiKey":22,"requestApiVersion":4,"correlationId":2,
    "clientId":"app-1","requestApiKeyName":"INIT_PRODUCER_ID"},"request":{...},
    "response":{"throttleTimeMs":0,"errorCode":0,"producerId":4000,"producerEpoch":0},
    ...,"principal":"User:alice",...} (kafka.request.logger)

Only INIT_PRODUCER_ID (API key 22) names a producer id; at DEBUG the log also holds
every Fetch, Metadata and Produce request, well over 90% of its lines. So a batch
of lines is judged in three steps:

1. **Noise, before any JSON parse.** One regular expression (RE2, stopping at the
   first match, near the start of a line) finds each line's ``requestApiKey``; in a
   shipper's JSON record the line's quotes are escaped, and the same expression
   finds it. Lines of other keys are counted per key name and dropped; lines
   without ``Completed request:`` are counted as ``not-a-request``. Neither is bad
   input.
2. **The INIT_PRODUCER_ID lines** are parsed one by one (they are few): a shipper's
   record is unwrapped first (the line in the first of ``message_fields`` present,
   the broker in the first of ``host_fields``); then the line's time (log4j's
   ``yyyy-MM-dd HH:mm:ss,SSS`` in ``timezone``) and its JSON. A granted init
   (``errorCode`` 0) becomes an event: principal, producer_id, producer_epoch,
   timestamp, and the client's identity: client_id, transactional_id, the client's
   address (from ``connection``), its software (``clientInformation``) and the broker
   (the shipper's host, else the file's broker, else the listener's address). A refused one (``errorCode``
   not 0, ``producerId`` -1) granted nothing: counted as ``INIT_PRODUCER_ID refused``.
3. **Broken lines** (cut JSON, a missing field, a bad time, a line of the request
   log without a key) become dead letters with their reason. No line fails the query.

A re-init of a transactional producer, or a KIP-360 epoch bump, returns the same PID
with a higher epoch: the quota core knows the PID and does not count it again.

Worked example: of 100 lines (95 FETCH, 3 METADATA, one granted and one refused
INIT_PRODUCER_ID), the screen yields one folded event row (User:alice, PID 4000),
and one row of counts: FETCH 95, METADATA 3, INIT_PRODUCER_ID refused 1.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pidquota.conf import jsontext
from pidquota.conf.formats import entry
from pidquota.formats.folded import (
    FOLDED,
    PerRow,
    as_binary,
    client_column,
    fold,
    folded_batch,
    judged_batch,
    principal_problem,
    sightings_schema,
    sources_of,
)
from pidquota.quota.client import COLUMNS as CLIENT_COLUMNS

NAME = "kafka-request-log"
NOT_A_REQUEST = "not-a-request"  # skipped: a line that is no request-log line
INIT_PRODUCER_ID = 22
REFUSED = "INIT_PRODUCER_ID refused"
_KEY = r'requestApiKey\\?"\s*:\s*(?P<key>[0-9]{1,6})'
_MARK = "Completed request:"
_LINE = re.compile(
    r"\[(?P<time>[^\]]*)\] (?P<level>[A-Z]+) Completed request:(?P<json>\{.*\}) \((?P<logger>[^()]*)\)"
)
_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}),(\d{3})")
_MAX_EPOCH = 32_767
MAX_TIMESTAMP = 253_402_300_799_999  # 9999-12-31, as the JSON event's timestamp
# Kafka's ApiKeys, by id (clients/src/main/java/org/apache/kafka/common/protocol/ApiKeys.java).
_API_KEYS_TEXT = (
    "PRODUCE FETCH LIST_OFFSETS METADATA LEADER_AND_ISR STOP_REPLICA UPDATE_METADATA "
    "CONTROLLED_SHUTDOWN OFFSET_COMMIT OFFSET_FETCH FIND_COORDINATOR JOIN_GROUP HEARTBEAT "
    "LEAVE_GROUP SYNC_GROUP DESCRIBE_GROUPS LIST_GROUPS SASL_HANDSHAKE API_VERSIONS CREATE_TOPICS "
    "DELETE_TOPICS DELETE_RECORDS INIT_PRODUCER_ID OFFSET_FOR_LEADER_EPOCH ADD_PARTITIONS_TO_TXN "
    "ADD_OFFSETS_TO_TXN END_TXN WRITE_TXN_MARKERS TXN_OFFSET_COMMIT DESCRIBE_ACLS CREATE_ACLS "
    "DELETE_ACLS DESCRIBE_CONFIGS ALTER_CONFIGS ALTER_REPLICA_LOG_DIRS DESCRIBE_LOG_DIRS "
    "SASL_AUTHENTICATE CREATE_PARTITIONS CREATE_DELEGATION_TOKEN RENEW_DELEGATION_TOKEN "
    "EXPIRE_DELEGATION_TOKEN DESCRIBE_DELEGATION_TOKEN DELETE_GROUPS ELECT_LEADERS "
    "INCREMENTAL_ALTER_CONFIGS ALTER_PARTITION_REASSIGNMENTS LIST_PARTITION_REASSIGNMENTS "
    "OFFSET_DELETE DESCRIBE_CLIENT_QUOTAS ALTER_CLIENT_QUOTAS DESCRIBE_USER_SCRAM_CREDENTIALS "
    "ALTER_USER_SCRAM_CREDENTIALS VOTE BEGIN_QUORUM_EPOCH END_QUORUM_EPOCH DESCRIBE_QUORUM "
    "ALTER_PARTITION UPDATE_FEATURES ENVELOPE FETCH_SNAPSHOT DESCRIBE_CLUSTER DESCRIBE_PRODUCERS "
    "BROKER_REGISTRATION BROKER_HEARTBEAT UNREGISTER_BROKER DESCRIBE_TRANSACTIONS LIST_TRANSACTIONS "
    "ALLOCATE_PRODUCER_IDS CONSUMER_GROUP_HEARTBEAT CONSUMER_GROUP_DESCRIBE CONTROLLER_REGISTRATION "
    "GET_TELEMETRY_SUBSCRIPTIONS PUSH_TELEMETRY ASSIGN_REPLICAS_TO_DIRS LIST_CLIENT_METRICS_RESOURCES "
    "DESCRIBE_TOPIC_PARTITIONS SHARE_GROUP_HEARTBEAT SHARE_GROUP_DESCRIBE SHARE_FETCH "
    "SHARE_ACKNOWLEDGE ADD_RAFT_VOTER REMOVE_RAFT_VOTER UPDATE_RAFT_VOTER "
    "INITIALIZE_SHARE_GROUP_STATE READ_SHARE_GROUP_STATE WRITE_SHARE_GROUP_STATE "
    "DELETE_SHARE_GROUP_STATE READ_SHARE_GROUP_STATE_SUMMARY STREAMS_GROUP_HEARTBEAT "
    "STREAMS_GROUP_DESCRIBE DESCRIBE_SHARE_GROUP_OFFSETS ALTER_SHARE_GROUP_OFFSETS "
    "DELETE_SHARE_GROUP_OFFSETS"
)
API_KEY_NAMES = tuple(_API_KEYS_TEXT.split())


def key_name(key: int) -> str:
    """A request's API key as Kafka names it (a label: bounded, whatever the line says)."""
    if 0 <= key < len(API_KEY_NAMES):
        return API_KEY_NAMES[key]
    return f"API_KEY_{key}" if key < 1000 else "API_KEY_OTHER"


class BadLine(ValueError):
    """A line that looks like a request-log line but cannot be read; its text is the reason."""


@dataclass(frozen=True)
class Options:
    """How to read request-log lines: the brokers' time zone, and where a shipper's JSON
    record keeps the line and the host (dotted paths, the first present wins)."""

    timezone: str = "UTC"
    message_fields: tuple[str, ...] = ("message", "log")
    host_fields: tuple[str, ...] = ("host.name", "host", "hostname")

    def to_source(self) -> dict[str, str]:
        """As source options (strings; Spark lower-cases the keys)."""
        return {
            "inputFormat": NAME,
            "requestLogTimezone": self.timezone,
            "requestLogMessageFields": ",".join(self.message_fields),
            "requestLogHostFields": ",".join(self.host_fields),
        }

    @classmethod
    def from_source(cls, options) -> Options | None:
        """The source options' request-log settings, or None for the JSON event format."""
        get = lambda k: options.get(k) or options.get(k.lower())  # noqa: E731
        if get("inputFormat") != NAME:
            return None
        split = lambda k: tuple(p.strip() for p in (get(k) or "").split(",") if p.strip())  # noqa: E731
        return cls(
            get("requestLogTimezone") or "UTC",
            split("requestLogMessageFields"),
            split("requestLogHostFields"),
        )

    @classmethod
    def from_config(cls, config) -> Options:
        split = lambda k: tuple(p.strip() for p in config[k].split(",") if p.strip())  # noqa: E731
        return cls(
            config["pidquota.request.log.timezone"],
            split("pidquota.request.log.message.fields"),
            split("pidquota.request.log.host.fields"),
        )


class Clock:
    """log4j's ``%d`` (``yyyy-MM-dd HH:mm:ss,SSS``, the broker's local time) to ms since the
    epoch. The offset is looked up once per hour of text: DST changes on an hour, and in
    the hour repeated when clocks go back the earlier of the two is taken (``fold=0``)."""

    def __init__(self, timezone: str):
        self.zone = ZoneInfo(timezone)
        self._hours: dict[str, int] = {}

    def ms(self, text: str) -> int:
        m = _TIME.fullmatch(text)
        if m is None:
            raise BadLine(f"bad time {text[:40]!r}: expected yyyy-MM-dd HH:mm:ss,SSS (log4j's %d)")
        hour = text[:13]
        base = self._hours.get(hour)
        if base is None:
            y, mo, d, h = (int(m.group(i)) for i in range(1, 5))
            try:
                at = dt.datetime(y, mo, d, h, tzinfo=self.zone)
            except ValueError:
                raise BadLine(f"bad time {text[:40]!r}: no such date") from None
            if len(self._hours) > 10_000:  # garbage times must not grow the cache for ever
                self._hours.clear()
            base = self._hours[hour] = int(at.timestamp()) * 1000
        minute, second, milli = int(m.group(5)), int(m.group(6)), int(m.group(7))
        if minute > 59 or second > 59:
            raise BadLine(f"bad time {text[:40]!r}: no such time")
        ms = base + (minute * 60 + second) * 1000 + milli
        if not 0 <= ms <= MAX_TIMESTAMP:
            raise BadLine(f"bad time {text[:40]!r}: before 1970 or after 9999")
        return ms


def _dig(record: dict, path: str):
    value = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def unwrap(value: str, options: Options) -> tuple[str, str | None]:
    """A record's request-log line and broker: the record itself if it is the raw line, or
    the line and host in a shipper's JSON record (Filebeat, Vector, Fluent Bit)."""
    if not value.lstrip().startswith("{"):
        return value, None
    try:
        record = jsontext.loads(value)
    except ValueError:
        raise BadLine("a shipper's record that is not valid JSON (cut?)") from None
    if not isinstance(record, dict):
        raise BadLine("a shipper's record that is not a JSON object")
    line = next((v for f in options.message_fields if isinstance(v := _dig(record, f), str)), None)
    if line is None:
        raise BadLine(
            f"a shipper's record without the line: none of the fields {', '.join(options.message_fields)} "
            "holds a string; set pidquota.request.log.message.fields to the field your shipper writes"
        )
    host = next((v for f in options.host_fields if isinstance(v := _dig(record, f), str)), None)
    return line, host


def _int_field(obj: dict, where: str, name: str, low: int, high: int) -> int:
    value = obj.get(name)
    if name not in obj:
        raise BadLine(f"missing field {where}.{name}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadLine(f"field {where}.{name} must be an integer, got {jsontext.brief(value)}")
    if not low <= value <= high:
        raise BadLine(f"field {where}.{name} is out of range ({low}..{high}): {value}")
    return value


def _object(d: dict, name: str) -> dict:
    value = d.get(name)
    if not isinstance(value, dict):
        got = "nothing" if name not in d else jsontext.brief(value)
        raise BadLine(f"field {name} must be an object, got {got}")
    return value


def parse_init(line: str, clock: Clock, max_principal: int) -> dict | None:
    """One INIT_PRODUCER_ID line: its event, or None when the init was refused.
    Raises :class:`BadLine` with the reason when the line cannot be read."""
    m = _LINE.fullmatch(line.rstrip("\r\n"))
    if m is None:
        if not line.startswith("["):
            raise BadLine("a request-log line must start with '[' and the time (log4j's [%d] %p %m (%c))")
        raise BadLine("request-log line is cut or damaged: it does not end in '} (logger name)'")
    ts = clock.ms(m["time"])
    try:
        d = jsontext.loads(m["json"])
    except ValueError as exc:  # JSONDecodeError, a 5000-digit number, deep nesting
        why = f"{exc.msg} at {exc.pos}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise BadLine(f"request-log JSON is not valid (cut or damaged): {why}") from None
    if not isinstance(d, dict):
        raise BadLine("request-log JSON is not an object")
    response = _object(d, "response")
    if _int_field(response, "response", "errorCode", -(2**15), 2**15 - 1) != 0:
        return None
    pid = _int_field(response, "response", "producerId", 0, 2**63 - 1)
    epoch = _int_field(response, "response", "producerEpoch", 0, _MAX_EPOCH)
    principal = d.get("principal")
    if not isinstance(principal, str):
        raise BadLine("missing field principal" if principal is None else "field principal must be a string")
    why = principal_problem(principal, max_principal)
    if why:
        raise BadLine(why)
    header = d.get("requestHeader") if isinstance(d.get("requestHeader"), dict) else {}
    request = d.get("request") if isinstance(d.get("request"), dict) else {}
    client = header.get("clientId")
    txn = request.get("transactionalId")
    local, address = connection_ends(d.get("connection"))
    return {
        "timestamp": ts,
        "principal": principal,
        "producer_id": pid,
        "producer_epoch": epoch,
        "client_id": client if isinstance(client, str) else None,
        "transactional_id": txn if isinstance(txn, str) else None,
        "client_address": address,
        "client_software": software(d.get("clientInformation")),
        "listener": local,
    }


_CONNECTION = re.compile(r"(?P<local>.+?:\d+)-(?P<remote>.+):\d+-\d+(?:-\d+)?")


def connection_ends(connection) -> tuple[str | None, str | None]:
    """The broker's end (host:port) and the client's host of a request log's ``connection``,
    Kafka's ``ConnectionId``: ``local:port-remote:port-processor[-index]``, e.g.
    ``127.0.0.1:9092-10.0.0.5:55158-0`` gives ``("127.0.0.1:9092", "10.0.0.5")``. An IPv6
    host holds colons, and its zone id (``fe80::1%eth-0``) may hold a dash, so the ends are
    found by their ``:port-`` and the trailing processor number; anything else gives Nones."""
    if not isinstance(connection, str):
        return None, None
    m = _CONNECTION.fullmatch(connection)
    if m is None:
        return None, None
    return m["local"], m["remote"]


def software(info) -> str | None:
    """``clientInformation`` (KIP-511) as one text: ``kafka-python 3.0.12``; None when the
    client sent none (``unknown``, as the broker writes it for old clients)."""
    if not isinstance(info, dict):
        return None
    parts = [
        v for k in ("softwareName", "softwareVersion") if isinstance(v := info.get(k), str) and v != "unknown"
    ]
    return " ".join(parts) or None


@dataclass
class Judged:
    """What a batch of request-log lines made: events, dead letters, lines skipped per kind."""

    events: list[dict]
    dead: list[dict]
    skipped: Counter


def api_keys(values: pa.Array) -> np.ndarray:
    """Each record's request API key (-1: none found), by one RE2 search per record."""
    found = pc.extract_regex(values, _KEY)
    key = pc.if_else(pc.is_valid(found), pc.cast(pc.struct_field(found, [0]), pa.string()), None)
    return pc.fill_null(pc.cast(key, pa.int64()), -1).to_numpy(zero_copy_only=False)


class RequestLogJudge:
    """Judges batches of records (raw lines or a shipper's JSON) as the module docstring says."""

    def __init__(self, options: Options, max_principal: int):
        self.options, self.max_principal = options, max_principal
        self.clock = Clock(options.timezone)

    def judge(self, values: pa.Array, sources: Sequence[str | None], brokers: Sequence[str | None]) -> Judged:
        """``sources[i]`` and ``brokers[i]`` are asked for the inits and dead letters only."""
        keys = api_keys(values)
        skipped: Counter = Counter()
        found = keys >= 0
        others, counts = np.unique(keys[found & (keys != INIT_PRODUCER_ID)], return_counts=True)
        for key, n in zip(others.tolist(), counts.tolist(), strict=True):
            skipped[key_name(key)] += n
        unkeyed = np.flatnonzero(~found)
        if len(unkeyed):
            marked = pc.fill_null(pc.match_substring(values.take(unkeyed), _MARK), False)
            marked = marked.to_numpy(zero_copy_only=False).astype(bool)  # a null record: not a request
            if not marked.all():
                skipped[NOT_A_REQUEST] += int((~marked).sum())
            unkeyed = unkeyed[marked]
        events, dead = [], []
        for i in unkeyed.tolist():
            raw = _text(values[i].as_py())
            dead.append(
                {
                    "raw": raw,
                    "reason": "request-log line without a requestApiKey (cut?)",
                    "source": sources[i],
                }
            )
        for i in np.flatnonzero(keys == INIT_PRODUCER_ID).tolist():
            raw = _text(values[i].as_py())
            try:
                line, host = unwrap(raw, self.options)
                event = parse_init(line, self.clock, self.max_principal)
            except BadLine as exc:
                dead.append({"raw": raw, "reason": str(exc), "source": sources[i]})
                continue
            if event is None:
                skipped[REFUSED] += 1
            else:
                event["broker"] = host or brokers[i] or event["listener"]
                events.append(event)
        return Judged(events, dead, skipped)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


class RequestLogScreen:
    """A source's screen for request-log lines: line batches in, screened rows out
    (``formats/folded.py``'s ``FOLDED`` columns then the line columns, nothing left for
    Spark's strict parse). ``broker_of`` names the broker of a line's file, if any."""

    def __init__(self, line_schema: pa.Schema, max_principal: int, options: Options, broker_of=None):
        self.line_schema = as_binary(line_schema)
        self.schema = pa.schema([*FOLDED, *self.line_schema])
        self.judge = RequestLogJudge(options, max_principal)
        self.broker_of = functools.lru_cache(maxsize=1024)(broker_of or (lambda source: None))

    def screen(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        values = batch.column("value")
        sources = sources_of(batch)
        files = "source_file" in batch.schema.names
        brokers = PerRow(len(sources), lambda i: self.broker_of(sources[i]) if files else None)
        judged = self.judge.judge(values, sources, brokers)
        if judged.events:
            events = pa.Table.from_pylist(judged.events, schema=sightings_schema(*CLIENT_COLUMNS))
            events = events.append_column("client", client_column(events))
            yield folded_batch(fold(events), self.schema)
        letters = [json.dumps(d, ensure_ascii=False) for d in judged.dead]
        if judged.skipped:
            letters.append(json.dumps({"skipped": dict(sorted(judged.skipped.items()))}))
        if letters:
            yield judged_batch(letters, self.schema)


class RequestLog:
    """The broker request log (``pidquota.formats`` protocol): the screen judges every line, so
    there is no strict parse; a line that is no request-log line is skipped as ``not-a-request``."""

    entry = entry(NAME)
    reads = "lines"
    strict = None
    foreign = NOT_A_REQUEST

    def recognise(self, text: str) -> bool:
        return _MARK in text

    def said(self, config) -> str:
        return ""

    def options(self, config) -> dict[str, str]:
        return Options.from_config(config).to_source()

    def screen(self, line_schema: pa.Schema, max_principal: int, options, broker_of=None) -> RequestLogScreen:
        return RequestLogScreen(
            line_schema, max_principal, Options.from_source(options) or Options(), broker_of
        )


FORMAT = RequestLog()
