"""What the brokers' plug-in sees, as input (``--input-format plugin-inits``): one record per
InitProducerId a broker answered, published by pidquota's broker plug-in to its inits topic
(``pidquota-plugin-inits``; ``plugin/``'s ``InitsPublisher``), so no broker needs its request
log at DEBUG.

Each init is one line of JSON; a record holds one principal's inits of a moment, a line each
(the plug-in gathers a flood's inits for 50 ms: one record where there would be dozens), keyed
by the principal::

    {"v":1,"at_ms":1764000000123,"broker":1,"run":"c3a9...","seq":42,"principal":"User:alice",
     "client_id":"app-1","client_address":"10.0.0.5","listener":"SASL_SSL",
     "transactional_id":null,"outcome":"granted","software":"apache-kafka-java 3.9.1"}

The plug-in sees the request, not the broker's answer, so it cannot know the PID the broker
gave. Each granted init stands for one, a *synthetic PID* made from what names the init:

* **An idempotent init** (``transactional_id`` null) is a new PID: the hash of ``(broker, run,
  seq)``, which name one request for ever (``run`` is random at each start of the plug-in,
  ``seq`` counts from 0). A record the plug-in's producer sent twice (a retry) is the same
  PID, so the quota counts it once, as the request log's PID would be.
* **A transactional init** is keyed by its transactional id: the hash of the id, the same
  for each start of the same id, as the broker gives the same PID with a higher epoch.
* **An init the plug-in's rule refused** (``outcome`` ``refused``) or Kafka's ACLs denied
  (``denied``) granted nothing: counted as skipped, as the request log's refused inits are.

The hash is BLAKE2b's first 8 bytes with the sign bit cleared: an int64 like a PID. What the
plug-in cannot tell from a request: a client that asks InitProducerId again for the PID it has
(KIP-360's epoch bump of an idempotent producer, which the Java client does without asking, and
librdkafka does by asking) is a new PID here and not in the request log (docs/broker-plugin.md).

A record that is not a JSON object with ``"v": 1`` is none of the plug-in's (another
producer's, or a newer plug-in's): skipped and counted as ``not-a-plugin-init`` (or
``plugin-init of another version``). One of the plug-in's with a required field (``at_ms``,
``broker``, ``run``, ``seq``, ``principal``, ``outcome``) missing or of the wrong type, a text
that is no Unicode (a lone surrogate), or longer than the plug-in writes, is a dead letter with
the field named; a client field missing is not known (null). No record fails the query.

Worked example: the records (User:a, broker 1, run r, seq 7, granted), the same record again,
(User:a, transactional id "tx", granted), (User:a, seq 8, refused) and ``hello`` give one
folded row (User:a, PIDs [h(1,r,7), h(1,r,7), h("tx")]: the quota sees 2 distinct PIDs),
and the counts ``INIT_PRODUCER_ID refused`` 1, ``not-a-plugin-init`` 1.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pyarrow as pa

from pidquota.conf import jsontext
from pidquota.conf.formats import entry
from pidquota.formats.folded import (
    FOLDED,
    as_binary,
    principal_problem,
    screened_rows,
    sources_of,
)

NAME = "plugin-inits"
FOREIGN = "not-a-plugin-init"  # skipped: a record none of the plug-in's
OTHER_VERSION = "plugin-init of another version"
REFUSED = "INIT_PRODUCER_ID refused"  # as the request log counts them
DENIED = "INIT_PRODUCER_ID denied"
VERSION = 1
MAX_RECORD = (
    1_048_576  # bytes, the plug-in producer's max.request.size: two ids of 32,767 characters, escaped
)
MAX_TIMESTAMP = 253_402_300_799_999
_MASK = (1 << 63) - 1
_OUTCOMES = ("granted", "refused", "denied")
_TEXTS = ("client_id", "client_address", "listener", "transactional_id", "software")
CLIENTS = ("client_id", "transactional_id", "client_address", "client_software", "broker")


class BadRecord(ValueError):
    """One of the plug-in's records that cannot be read; its text is the reason."""


class Foreign(ValueError):
    """A record that is none of the plug-in's; its text is the kind it is counted as."""


def synthetic_pid(record: dict) -> int:
    """The PID an init stands for (see the module docstring)."""
    txn = record["transactional_id"]
    name = (
        f"t\x1f{txn}" if txn is not None else f"i\x1f{record['broker']}\x1f{record['run']}\x1f{record['seq']}"
    )
    return (
        int.from_bytes(hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")
        & _MASK
    )


def _integer(record: dict, name: str, low: int, high: int) -> int:
    if name not in record:
        raise BadRecord(f"missing field {name}")
    value = record[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRecord(f"field {name} must be an integer, got {jsontext.brief(value)}")
    if not low <= value <= high:
        raise BadRecord(f"field {name} is out of range ({low}..{high}): {value}")
    return value


def parse(raw: bytes, max_principal: int) -> tuple[str, dict | None]:
    """One record's outcome and its init (None: it granted nothing). Raises
    :class:`Foreign` with the kind to count, or :class:`BadRecord` with the reason."""
    if len(raw) > MAX_RECORD:
        if raw.lstrip()[:40].startswith(b'{"v":1,'):
            raise BadRecord(
                f"a record of {len(raw):,} bytes, longer than the plug-in writes ({MAX_RECORD:,})"
            )
        raise Foreign(FOREIGN)
    try:
        record = jsontext.loads(raw)
    except ValueError:
        raise Foreign(FOREIGN) from None
    if not isinstance(record, dict) or "v" not in record:
        raise Foreign(FOREIGN)
    v = record["v"]
    if isinstance(v, bool) or not isinstance(v, int):
        raise Foreign(FOREIGN)
    if v != VERSION:
        raise Foreign(OTHER_VERSION)
    outcome = record.get("outcome")
    if outcome not in _OUTCOMES:
        raise BadRecord(f"field outcome must be one of {', '.join(_OUTCOMES)}, got {jsontext.brief(outcome)}")
    at = _integer(record, "at_ms", 0, MAX_TIMESTAMP)
    _integer(record, "broker", -(2**31), 2**31 - 1)
    _integer(record, "seq", 0, 2**63 - 1)
    run, principal = record.get("run"), record.get("principal")
    if not isinstance(run, str) or not 0 < len(run) <= 64:
        raise BadRecord(f"field run must be a text of 1 to 64 characters, got {jsontext.brief(run)}")
    if not isinstance(principal, str):
        raise BadRecord(f"field principal must be a text, got {jsontext.brief(principal)}")
    why = principal_problem(principal, max_principal)
    if why:
        raise BadRecord(why)
    for name in _TEXTS:
        if record.get(name) is not None and not isinstance(record[name], str):
            raise BadRecord(f"field {name} must be a text or null, got {jsontext.brief(record[name])}")
        record.setdefault(name, None)
    for name in ("principal", "run", *_TEXTS):
        if record[name] is not None and not record[name].isascii():
            try:
                record[name].encode("utf-8")
            except UnicodeEncodeError as exc:  # JSON's \ud800 alone: no UTF-8 text holds it
                raise BadRecord(
                    f"field {name} holds a lone surrogate at character {exc.start}: not Unicode text"
                ) from None
    if outcome != "granted":
        return outcome, None
    return outcome, {
        "principal": principal,
        "producer_id": synthetic_pid(record),
        "timestamp": at,
        "producer_epoch": -1,
        "client_id": record["client_id"],
        "transactional_id": record["transactional_id"],
        "client_address": record["client_address"],
        "client_software": record["software"],
        "broker": str(record["broker"]),
    }


def record_lines(values: list) -> list[tuple[int, bytes]]:
    """Each record's lines, with the record's row (an empty record is one empty line: counted)."""
    out = []
    for i, value in enumerate(values):
        if value and b"\n" in value:
            out += [(i, line) for line in value.split(b"\n") if line.strip()] or [(i, b"")]
        else:
            out.append((i, value or b""))
    return out


class PluginInitsScreen:
    """Record batches in; folded sightings, dead letters and counts out (nothing left over)."""

    def __init__(self, line_schema: pa.Schema, max_principal: int):
        self.schema = pa.schema([*FOLDED, *as_binary(line_schema)])
        self.max_principal = max_principal

    def screen(self, batch: pa.RecordBatch):
        sources = sources_of(batch)
        events, letters, skipped = [], [], Counter()
        for i, line in record_lines(batch.column("value").to_pylist()):
            raw = line
            try:
                outcome, event = parse(raw, self.max_principal)
            except Foreign as kind:
                skipped[str(kind)] += 1
                continue
            except BadRecord as exc:
                text = raw.decode("utf-8", errors="replace")
                letters.append(
                    json.dumps({"raw": text, "reason": str(exc), "source": sources[i]}, ensure_ascii=False)
                )
                continue
            if event is None:
                skipped[REFUSED if outcome == "refused" else DENIED] += 1
            else:
                events.append(event)
        yield from screened_rows(events, CLIENTS, letters, skipped, self.schema)


class PluginInits:
    """The plug-in's inits (``pidquota.formats`` protocol): the screen judges every record."""

    entry = entry(NAME)
    reads = "lines"
    strict = None
    foreign = FOREIGN

    def recognise(self, text: str) -> bool:
        return text.startswith('{"v":1,') and '"outcome":' in text and '"seq":' in text

    def options(self, config) -> dict[str, str]:
        return {"inputFormat": NAME}

    def said(self, config) -> str:
        return ""

    def screen(
        self, line_schema: pa.Schema, max_principal: int, options=None, broker_of=None
    ) -> PluginInitsScreen:
        return PluginInitsScreen(line_schema, max_principal)


FORMAT = PluginInits()
