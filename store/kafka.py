"""The one way pidquota connects to Kafka: URLs, client options, secrets, and the
producer, consumer and fetch client factories that the source, the sink and the
traffic generator all use (so security settings apply everywhere)."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

from pidquota.conf import jsontext
from pidquota.conf.errors import ConfigError, PidquotaError

# pidquota option key -> kafka-python keyword. The same keys are Spark data
# source options; Spark redacts option values whose key says "password".
CLIENT_OPTIONS = {
    "kafka.security.protocol": "security_protocol",
    "kafka.sasl.mechanism": "sasl_mechanism",
    "kafka.sasl.username": "sasl_plain_username",
    "kafka.sasl.password": "sasl_plain_password",
    "kafka.ssl.cafile": "ssl_cafile",
}
SECRET_OPTIONS = {"kafka.sasl.password"}
DEFAULT_PORT = 9092  # Kafka's: a broker address without a port means this one
URL_FORM = f"kafka://HOST[:PORT][,HOST[:PORT]...]/TOPIC[,TOPIC...] (PORT defaults to {DEFAULT_PORT})"


CLIENT_ID = "pidquota"  # the client id of every client pidquota opens: its own requests in a broker's log


class KafkaError(PidquotaError):
    """Kafka could not be reached, or data the query needs is gone."""


@dataclass(frozen=True)
class KafkaUrl:
    bootstrap: str
    topic: str

    @classmethod
    def parse(cls, url: str) -> KafkaUrl:
        """``kafka://HOST[:PORT][,HOST[:PORT]...]/TOPIC``; ``bootstrap`` names every port (default 9092)."""
        shown = _redacted(url)
        if "@" in url.split("/", 3)[2 if url.startswith("kafka://") else 0]:
            raise ConfigError(
                f"{shown!r}: a Kafka URL takes no user or password; set pidquota.kafka.sasl.username "
                "and PIDQUOTA_KAFKA_SASL_PASSWORD instead"
            )
        m = re.match(r"^kafka://([^/]+)/([A-Za-z0-9._*-]+(?:,[A-Za-z0-9._*-]+)*)$", url)
        if not m:
            topics = url.partition("://")[2].partition("/")[2]
            hint = (
                "; topics are separated by ',' alone, without spaces or an empty name"
                if "," in topics
                else ""
            )
            raise ConfigError(f"{shown!r} is not a Kafka URL; use {URL_FORM}{hint}")
        try:
            return cls(with_ports(m.group(1)), m.group(2))
        except ConfigError as exc:
            raise ConfigError(f"{shown!r} is not a Kafka URL: {exc}; use {URL_FORM}") from None


def _redacted(url: str) -> str:
    """A URL fit for a message: ``user:password@`` replaced."""
    return re.sub(r"^(kafka://)[^/@]*@", r"\1***@", url)


def with_ports(hosts: str) -> str:
    """``HOST[:PORT],...`` with every port written out: a host without one gets 9092."""
    out = []
    for host in hosts.split(","):
        m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(\d{1,5}))?", host.strip())
        if not m or not 0 < int(m.group(2) or DEFAULT_PORT) < 65536:
            raise ConfigError(f"{host!r} is not HOST or HOST:PORT with a port from 1 to 65535")
        out.append(f"{m.group(1)}:{m.group(2) or DEFAULT_PORT}")
    return ",".join(out)


def with_port(host: str) -> str:
    """One broker address as Kafka clients read it (no checks): without a port, port 9092."""
    return host if re.search(r":\d+$", host) else f"{host}:{DEFAULT_PORT}"


def parse_starting_offsets(text: str) -> str | int | dict:
    """``startingOffsets``: ``earliest``, ``latest``, a timestamp in ms, or a JSON map
    ``{"TOPIC": {"PARTITION": OFFSET}}`` where OFFSET is >= 0, or Spark's -1 (that partition's
    latest) or -2 (its earliest). Returns the word, the timestamp, or the map with string keys."""
    how = str(text).strip()
    if how in ("earliest", "latest"):
        return how
    if re.fullmatch(r"-?[0-9]+", how):  # ASCII digits: str.isdigit() also takes '²', which int() refuses
        if len(how) > 19:
            raise ConfigError(
                f"startingOffsets {how[:30]}... is not a timestamp in ms: it has {len(how)} digits"
            )
        if int(how) < 0:
            raise ConfigError(
                f"startingOffsets {how} is a negative timestamp; give ms since the epoch, earliest or latest"
            )
        return int(how)
    try:
        given = jsontext.loads(how)
    except ValueError:
        given = None
    if not isinstance(given, dict) or not given:
        raise ConfigError(
            f"startingOffsets {how!r} is not earliest, latest, a timestamp in ms or a JSON offset map "
            'such as {"TOPIC": {"0": 42}}'
        )
    return {topic: _partition_offsets(topic, parts) for topic, parts in given.items()}


def _partition_offsets(topic: str, parts) -> dict[str, int]:
    if not isinstance(parts, dict):
        raise ConfigError(
            f'startingOffsets gives topic {topic!r} {parts!r}; give a map of partition to offset, e.g. {{"0": 42}}'
        )
    out = {}
    for p, off in parts.items():
        if not str(p).isdigit():
            raise ConfigError(f"startingOffsets names partition {p!r} of {topic!r}; a partition is a number")
        if type(off) is not int or off < -2:
            raise ConfigError(
                f"startingOffsets gives {topic}-{p} the offset {off!r}; "
                "an offset is a number >= 0, or -1 (latest) or -2 (earliest)"
            )
        out[str(int(p))] = off
    return out


def normalized(options) -> dict:
    """Spark hands data source options over with lower-cased keys; so does this,
    so that code and tests look options up one way."""
    return {str(k).lower(): v for k, v in dict(options).items()}


def client_kwargs(options: dict) -> dict:
    """kafka-python keyword arguments from pidquota's ``kafka.*`` options."""
    kwargs = {"bootstrap_servers": options["kafka.bootstrap.servers"].split(",")}
    for key, kw in CLIENT_OPTIONS.items():
        if options.get(key):
            kwargs[kw] = options[key]
    return kwargs


def safe_options(options: dict) -> dict:
    """Options fit for a log line: secrets replaced."""
    return {k: ("<redacted>" if k in SECRET_OPTIONS else v) for k, v in options.items()}


def security_options(config) -> dict:
    """The ``kafka.*`` client options from the validated settings."""
    out = {}
    for key in CLIENT_OPTIONS:
        value = config[f"pidquota.{key}"]
        if value:
            out[key] = value
    return out


class _RefusedLogins(logging.Handler):
    """What kafka-python logs of SASL logins while it connects: it retries until bootstrapping
    times out, and its error then says only that. A broker that refuses a login answers with
    the reason and closes the connection; kafka-python sees the reason, or, when it reads the
    close first, only the close right after it sent the credentials."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.reason: str | None = None
        self.logging_in = self.closed_in_login = self.closed = False

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "socket disconnected" in text:  # it connected, and the broker closed the connection
            self.closed = True
        if "SaslAuthenticationFailed" in text:
            self.reason = text.rpartition("Authentication failed")[2].lstrip(": ") or "refused"
        elif record.name.startswith("kafka.net.sasl"):
            self.logging_in = True
        elif self.logging_in and "disconnected" in text:
            self.closed_in_login = True


def _connected(kind, options: dict, defaults: dict, extra: dict):
    from kafka.errors import KafkaTimeoutError

    kwargs = {**defaults, **client_kwargs(options), **extra}
    refused, kafka_log = _RefusedLogins(), logging.getLogger("kafka")
    kafka_log.addHandler(refused)
    try:
        return kind(**kwargs)
    except KafkaTimeoutError:  # no broker answered: bootstrapping timed out
        if refused.reason is not None or refused.closed_in_login:
            how = f"refused the {options.get('kafka.sasl.mechanism', 'SASL')} login"
            why = refused.reason or "it closed the connection at the login: a wrong user or password?"
            raise KafkaError(
                f"cannot connect to Kafka at {options['kafka.bootstrap.servers']}: the broker {how} of user "
                f"{options.get('kafka.sasl.username')!r} ({why}); check "
                "pidquota.kafka.sasl.username and PIDQUOTA_KAFKA_SASL_PASSWORD"
            ) from None
        if (
            refused.closed
            and str(options.get("kafka.security.protocol") or "PLAINTEXT").upper() == "PLAINTEXT"
        ):
            raise KafkaError(
                f"cannot connect to Kafka at {options['kafka.bootstrap.servers']}: the broker closed each "
                "connection pidquota opened without authentication: a listener that wants SASL or TLS? Give "
                "its settings as the run's (pidquota.kafka.security.protocol, pidquota.kafka.sasl.mechanism, "
                "pidquota.kafka.sasl.username and PIDQUOTA_KAFKA_SASL_PASSWORD, in --config FILE or the "
                "environment)"
            ) from None
        waited = kwargs.get(
            "bootstrap_timeout_ms", getattr(kind, "DEFAULT_CONFIG", {}).get("bootstrap_timeout_ms")
        )
        within = f" within {waited / 1000:g} s" if waited else ""
        raise KafkaError(
            f"cannot connect to Kafka at {options['kafka.bootstrap.servers']}: no broker answered{within}; "
            f"is it up, and is the address right (the port defaults to {DEFAULT_PORT})?"
        ) from None
    except Exception as exc:  # kafka-python raises several kinds here
        raise KafkaError(
            f"cannot connect to Kafka at {options['kafka.bootstrap.servers']}: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        kafka_log.removeHandler(refused)


def producer(options: dict, **extra):
    """An idempotent ``KafkaProducer`` (acks=all) from pidquota's ``kafka.*`` options."""
    from kafka import KafkaProducer

    defaults = {"enable_idempotence": True, "acks": "all", "linger_ms": 20, "client_id": CLIENT_ID}
    return _connected(KafkaProducer, options, defaults, extra)


def fenced(exc: BaseException) -> bool:
    """A newer producer with the same transactional id fenced this one: kafka-python raises the
    fencing error itself, or, when its sender saw it first, a KafkaError that carries it ("Cannot
    perform send because at least one previous transactional or idempotent request has failed")."""
    from kafka.errors import InvalidProducerEpochError, ProducerFencedError

    fencing = (ProducerFencedError, InvalidProducerEpochError)
    return isinstance(exc, fencing) or any(isinstance(a, fencing) for a in getattr(exc, "args", ()))


def bounded(step, wait_s: float, what: str) -> None:
    """Run ``step`` (a transaction step kafka-python waits for without end when a broker is
    gone mid-commit: ``commit_transaction``, ``abort_transaction``, ``init_transactions``) for
    at most ``wait_s``; else a KafkaError that says ``what`` got no answer. The step's own
    exception is raised as it is."""
    import threading

    done, failure = threading.Event(), []

    def run():
        try:
            step()
        except BaseException as exc:  # handed to the caller below
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="pidquota-kafka-txn", daemon=True).start()
    if not done.wait(wait_s):
        raise KafkaError(f"{what} got no answer within {wait_s:g} s; is the broker up?")
    if failure:
        raise failure[0]


def read_to_end(options: dict, topic: str, timeout_ms: int):
    """Every record of ``topic``'s partition 0, read_committed, from its start to the end it has
    now: a compacted topic of pidquota's own (the actuator's journal, the plug-in's state).
    All of it or a KafkaError: a read cut short by its deadline would pass for the topic's
    whole state (a throttle in it would look absent, and be tombstoned in the journal alone)."""
    from kafka import TopicPartition

    reader = consumer(options, request_timeout_ms=timeout_ms, isolation_level="read_committed")
    try:
        part = TopicPartition(topic, 0)
        reader.assign([part])
        reader.seek_to_beginning(part)
        end = reader.end_offsets([part])[part]
        records, deadline = [], time.monotonic() + timeout_ms / 1000
        while reader.position(part) < end:
            if time.monotonic() > deadline:
                raise KafkaError(
                    f"topic {topic!r} was not read to its end (offset {end}) within "
                    f"{timeout_ms / 1000:g} s; is every broker up?"
                )
            for batch in reader.poll(timeout_ms=500).values():
                records += batch
        return records
    except PidquotaError:
        raise
    except Exception as exc:  # kafka-python raises several kinds here
        raise KafkaError(f"cannot read topic {topic!r}: {type(exc).__name__}: {exc}") from None
    finally:
        reader.close()


def fetch_client(options: dict, **extra):
    """kafka-python's connection layer (``KafkaNetClient``: metadata, connections,
    requests), bootstrapped, for the Kafka source's own Fetch requests
    (``sources/kafka/connection.py``); the same ``kafka.*`` options as the producer."""
    from kafka.net.compat import KafkaNetClient

    def bootstrapped(**kwargs):
        client = KafkaNetClient(**kwargs)
        try:
            client.get_broker_version(timeout_ms=kwargs["request_timeout_ms"])
        except BaseException:
            client.close()
            raise
        return client

    defaults = {"client_id": CLIENT_ID, "request_timeout_ms": 30_000}
    return _connected(bootstrapped, options, defaults, extra)


def consumer(options: dict, **extra):
    """A ``KafkaConsumer`` without auto-commit from pidquota's ``kafka.*`` options. It never
    creates a topic: kafka-python's metadata requests ask the broker to create an unknown topic
    by default, so a reader's background refresh brought a deleted input topic back, empty,
    and the read waited for data that never came ('is the broker up?' instead of 'no longer
    exists': issue 43 §3's flaky test)."""
    from kafka import KafkaConsumer

    defaults = {"enable_auto_commit": False, "client_id": CLIENT_ID, "allow_auto_create_topics": False}
    return _connected(KafkaConsumer, options, defaults, extra)


def admin(options: dict, **extra):
    """A ``KafkaAdminClient`` from pidquota's ``kafka.*`` options (the actuator's quotas and
    ACLs, and the journal's topic)."""
    from kafka import KafkaAdminClient

    return _connected(KafkaAdminClient, options, {"client_id": CLIENT_ID}, extra)


def check_topic(options: dict, topic: str, timeout_ms: int) -> None:
    """At start-up: the cluster answers within ``timeout_ms`` and has ``topic`` (each of a
    comma-separated list; a pattern with ``*`` must match one); else a KafkaError naming the
    brokers (HOST:PORT)."""
    import fnmatch

    from kafka import KafkaConsumer

    bounded = "bootstrap_timeout_ms"  # kafka-python < 3 has no such option; this one bounds it there
    if bounded not in KafkaConsumer.DEFAULT_CONFIG:
        bounded = "api_version_auto_timeout_ms"
    probe = consumer(options, request_timeout_ms=timeout_ms, **{bounded: timeout_ms})
    names = topic.split(",")
    try:
        existing = probe.topics() if any("*" in n for n in names) else set()
        existing |= {n for n in names if "*" not in n and probe.partitions_for_topic(n)}
    except Exception as exc:  # kafka-python raises several kinds here
        raise KafkaError(
            f"cannot list the topics of Kafka at {options['kafka.bootstrap.servers']} within "
            f"{timeout_ms / 1000:g} s: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        probe.close()
    where = options["kafka.bootstrap.servers"]
    for name in names:
        if not any(fnmatch.fnmatchcase(t, name) for t in existing if not t.startswith("__") or t == name):
            if "*" in name:
                raise KafkaError(f"no topic on {where} matches {name!r}")
            raise KafkaError(f"topic {name!r} does not exist on {where}")


def output_options(config, input_url: str | None) -> dict | None:
    """Options for the Kafka writer from the ``pidquota.kafka.*.topic`` settings, or None."""
    topics = {
        "decisionsTopic": config["pidquota.kafka.decisions.topic"],
        "metricsTopic": config["pidquota.kafka.metrics.topic"],
        "deadLettersTopic": config["pidquota.kafka.dead.letters.topic"],
    }
    topics = {k: v for k, v in topics.items() if v}
    if not topics:
        return None
    bootstrap = None
    for key, value in topics.items():
        name = value.rpartition("/")[2] if value.startswith("kafka://") else value
        if any(c in name for c in ",*"):
            raise PidquotaError(f"{key} {value!r}: an output topic is one topic, without ',' or '*'")
        if value.startswith("kafka://"):
            url = KafkaUrl.parse(value)
            if bootstrap not in (None, url.bootstrap):
                raise PidquotaError("all output topics must be on one Kafka cluster")
            bootstrap, topics[key] = url.bootstrap, url.topic
    if bootstrap is None:
        if input_url is None:
            raise PidquotaError(
                "an output topic given by name needs a Kafka input; with a file input use kafka://HOST[:PORT]/TOPIC"
            )
        bootstrap = KafkaUrl.parse(input_url).bootstrap
    mode = {
        "sinkMode": config["pidquota.kafka.sink.mode"],
        "requestTimeoutMs": str(config["pidquota.kafka.request.timeout.ms"]),
        "sinkRetryMs": str(config["pidquota.kafka.sink.retry.ms"]),
    }
    return {"kafka.bootstrap.servers": bootstrap, **security_options(config), **topics, **mode}
