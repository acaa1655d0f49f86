"""Broker request-log lines, written as Kafka writes them (``kafka.request.logger`` at DEBUG).

Kafka (2.8 to 4.x, KIP-673) logs each completed request as ``[%d] %p %m (%c)``, the
message ``Completed request:`` and a JSON object that Jackson writes compactly, its keys
in this order: ``isForwarded``, ``requestHeader`` (the header's fields, then
``requestApiKeyName``), ``request``, ``response``, ``connection``, the timing fields,
``securityProtocol``, ``principal``, ``listener``, ``clientInformation``, and
``temporaryMemoryBytes`` / ``messageConversionsTime`` when not zero. The request and
response are the message schemas' fields in lowerCamelCase, present from the version
that adds them (``clients/src/main/resources/common/message/*.json``); a Produce
request's records are reduced to ``recordsSizeInBytes``.

The generator uses this to turn its produce-request events into the log a cluster
would write (``pidquota generate --format kafka-request-log``): an INIT_PRODUCER_ID
line when a producer id or epoch first appears, one PRODUCE line per event, and
``noise`` FETCH and METADATA lines per produce request.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator
from zoneinfo import ZoneInfo

LOGGER = "kafka.request.logger"
INIT_PRODUCER_ID, PRODUCE, FETCH, METADATA = 22, 0, 1, 3
_NAMES = {0: "PRODUCE", 1: "FETCH", 3: "METADATA", 18: "API_VERSIONS", 22: "INIT_PRODUCER_ID"}


def log4j_time(ms: int, timezone: str = "UTC") -> str:
    """``ms`` since the epoch as log4j's ``%d``: ``yyyy-MM-dd HH:mm:ss,SSS`` in ``timezone``."""
    at = dt.datetime.fromtimestamp(ms / 1000, tz=ZoneInfo(timezone))
    return at.strftime("%Y-%m-%d %H:%M:%S,") + f"{ms % 1000:03d}"


def init_producer_id(
    version: int,
    transactional_id: str | None = None,
    error: int = 0,
    producer_id: int = -1,
    epoch: int = -1,
    prior_id: int = -1,
    prior_epoch: int = -1,
    timeout_ms: int = 60_000,
) -> tuple[dict, dict]:
    """An InitProducerId request and response (v0 to v5) as the request log shows them:
    v3 adds the request's ProducerId and ProducerEpoch (KIP-360). A refused init
    answers ``producerId`` -1 and ``producerEpoch`` -1."""
    request: dict = {"transactionalId": transactional_id, "transactionTimeoutMs": timeout_ms}
    if version >= 3:
        request.update(producerId=prior_id, producerEpoch=prior_epoch)
    if error:
        producer_id, epoch = -1, -1
    response = {"throttleTimeMs": 0, "errorCode": error, "producerId": producer_id, "producerEpoch": epoch}
    return request, response


def produce(version: int, topic: str, partition: int, size: int, transactional_id: str | None = None):
    request = {
        "transactionalId": transactional_id,
        "acks": -1,
        "timeoutMs": 30_000,
        "topicData": [{"name": topic, "partitionData": [{"index": partition, "recordsSizeInBytes": size}]}],
    }
    partition_response = {"index": partition, "errorCode": 0, "baseOffset": 0, "logAppendTimeMs": -1}
    if version >= 5:
        partition_response["logStartOffset"] = 0
    response = {
        "responses": [{"name": topic, "partitionResponses": [partition_response]}],
        "throttleTimeMs": 0,
    }
    return request, response


def fetch(replica: int, topic: str, partition: int, session: int):
    request = {
        "replicaId": replica,
        "maxWaitMs": 500,
        "minBytes": 1,
        "maxBytes": 10_485_760,
        "isolationLevel": 0,
        "sessionId": session,
        "sessionEpoch": 1,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetchOffset": 0}]}],
        "forgottenTopicsData": [],
        "rackId": "",
    }
    response = {"throttleTimeMs": 0, "errorCode": 0, "sessionId": session, "responses": []}
    return request, response


def metadata(topic: str):
    request = {"topics": [{"name": topic}], "allowAutoTopicCreation": True}
    response = {
        "throttleTimeMs": 0,
        "brokers": [],
        "clusterId": "pidquota-sim",
        "controllerId": 1,
        "topics": [],
    }
    return request, response


def request_line(
    ms: int,
    api_key: int,
    version: int,
    request: dict | str,
    response: dict | str,
    principal: str = "User:ANONYMOUS",
    client_id: str | None = "",
    correlation_id: int = 0,
    timezone: str = "UTC",
    protocol: str = "SASL_SSL",
    software: tuple[str, str] = ("apache-kafka-java", "3.7.0"),
    api_name: str | None = None,
) -> str:
    """One request-log line, as a broker writes it."""
    body = {
        "isForwarded": False,
        "requestHeader": {
            "requestApiKey": api_key,
            "requestApiVersion": version,
            "correlationId": correlation_id,
            "clientId": client_id,
            "requestApiKeyName": api_name or _NAMES.get(api_key, f"API_{api_key}"),
        },
        "request": request,
        "response": response,
        "connection": f"10.0.0.1:9093-10.0.1.{correlation_id % 250}:5{correlation_id % 10000:04d}-7",
        "totalTimeMs": 1.25,
        "requestQueueTimeMs": 0.07,
        "localTimeMs": 0.9,
        "remoteTimeMs": 0.0,
        "throttleTimeMs": 0,
        "responseQueueTimeMs": 0.05,
        "sendTimeMs": 0.23,
        "securityProtocol": protocol,
        "principal": principal,
        "listener": protocol,
        "clientInformation": {"softwareName": software[0], "softwareVersion": software[1]},
    }
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return f"[{log4j_time(ms, timezone)}] DEBUG Completed request:{text} ({LOGGER})"


class RequestLog:
    """The request log of the generator's produce-request events (JSON lines), chunk after
    chunk: an INIT_PRODUCER_ID line (v4) before a producer id or epoch's first produce
    request, one PRODUCE line per event and ``noise`` FETCH and METADATA lines after it."""

    def __init__(self, noise: int = 10, timezone: str = "UTC"):
        self.noise, self.timezone = noise, timezone
        self._seen: set[tuple[str, int, int]] = set()
        self._n = 0

    def lines(self, events: Iterable[str]) -> Iterator[str]:
        tz = self.timezone
        for text in events:
            n = self._n = self._n + 1
            e = json.loads(text)
            ts, principal, pid = e["timestamp"], e["principal"], e["producer_id"]
            epoch, client, txn = (
                e.get("producer_epoch", -1),
                e.get("client_id", ""),
                e.get("transactional_id"),
            )
            topic, partition = e.get("topic", "t"), e.get("partition", 0)
            if pid >= 0 and (principal, pid, epoch) not in self._seen:
                self._seen.add((principal, pid, epoch))
                req, resp = init_producer_id(4, txn, 0, pid, max(epoch, 0))
                yield request_line(ts, INIT_PRODUCER_ID, 4, req, resp, principal, client, n, tz)
            req, resp = produce(9, topic, partition, 1024 + n % 512, txn)
            yield request_line(ts, PRODUCE, 9, req, resp, principal, client, n, tz)
            yield from self._noise(ts, topic, partition, principal, client, n)

    def _noise(
        self, ts: int, topic: str, partition: int, principal: str, client: str, n: int
    ) -> Iterator[str]:
        for k in range(self.noise):
            if k % 5 == 4:
                req, resp = metadata(topic)
                yield request_line(ts, METADATA, 12, req, resp, principal, client, n, self.timezone)
            else:
                req, resp = fetch(-1, topic, partition, 1000 + k)
                yield request_line(ts, FETCH, 13, req, resp, "User:consumer", "consumer-1", n, self.timezone)


def from_events(events: Iterable[str], noise: int = 10, timezone: str = "UTC") -> Iterator[str]:
    """The request log of one list of events (:class:`RequestLog`)."""
    return RequestLog(noise, timezone).lines(events)
