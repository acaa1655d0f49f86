"""Every pidquota setting, defined once: name, type, default and why, doc, range.

KIP-936's dotted names are used where the KIP has one; pidquota's own
settings live under ``pidquota.``. ``pidquota.conf.loader`` reads and validates them;
nothing else parses settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pidquota.conf import formats


@dataclass(frozen=True)
class Setting:
    name: str
    type: type
    default: Any
    reason: str  # why this default
    doc: str
    min: float | None = None
    max: float | None = None
    min_exclusive: bool = False
    choices: tuple[str, ...] | None = None
    secret: bool = False
    check: Callable[[Any], str | None] | None = None  # why a value is refused, or None
    shown_range: str | None = None  # what the docs say of the range, where a check decides it

    @property
    def shown_default(self) -> str:
        """The default as a properties file (and docs/configuration.md) writes it."""
        if isinstance(self.default, bool):
            return str(self.default).lower()
        return repr(self.default) if isinstance(self.default, str) else str(self.default)

    @property
    def env_var(self) -> str:
        """``PIDQUOTA_`` + the name without its ``pidquota.`` prefix, dots as underscores."""
        name = self.name.removeprefix("pidquota.")
        return "PIDQUOTA_" + name.replace(".", "_").replace("-", "_").upper()

    def range_text(self) -> str:
        if self.shown_range:
            return self.shown_range
        if self.type is bool:
            return "true or false"
        if self.choices:
            return "one of " + ", ".join(self.choices)
        lo = "" if self.min is None else (f"> {self.min}" if self.min_exclusive else f">= {self.min}")
        hi = "" if self.max is None else f"<= {self.max}"
        return " and ".join(p for p in (lo, hi) if p) or "any"


def _format_problem(name: str) -> str | None:
    """A format is a line of the registry (conf/formats.py), which the docs do not repeat: a
    new format is its module and that line."""
    if name in formats.names():
        return None
    return f"is not a format pidquota reads; give one of {', '.join(formats.names())} (pidquota formats)"


def _zone_problem(name: str) -> str | None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return "is not a time zone; use an IANA name such as UTC or Europe/Berlin"
    return None


def principal_list(text: str) -> list[str]:
    """A comma-separated list of principals, where a principal that holds commas (an SSL
    distinguished name) is double-quoted or has its commas escaped with a backslash.

    Worked example: ``User:admin, "User:CN=broker,OU=kafka,O=org", User:CN=a\\,O=b`` is
    ``["User:admin", "User:CN=broker,OU=kafka,O=org", "User:CN=a,O=b"]``."""
    out, word, quoted, escaped = [], [], False, False
    for c in text:
        if escaped:
            word.append(c)
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == '"':
            quoted = not quoted
        elif c == "," and not quoted:
            out.append("".join(word).strip())
            word = []
        else:
            word.append(c)
    out.append("".join(word).strip())
    return [p for p in out if p]


def principal_problem(principal: str) -> str | None:
    """Why pidquota must never send ``principal`` to a cluster as a user, or None. Kafka
    matches a principal's type exactly (``User``), reads ``User:*`` in an ACL as every user,
    and refuses an empty quota user."""
    kind, colon, name = principal.partition(":")
    if not colon:
        return f"{principal!r}, which is not a principal (User:NAME)"
    if kind != "User":
        if kind.lower() == "user":
            return f"{principal!r}, whose type is not User (Kafka's principal types are case-sensitive): write User:{name}"
        return f"{principal!r}, which is not a Kafka user (User:NAME)"
    if not name.strip():
        return f"{principal!r}, which has no name"
    if name == "*":
        return f"{principal!r}, Kafka's wildcard (in an ACL it means every user)"
    return None


def _principals_problem(text: str) -> str | None:
    """A comma-separated list of User:NAME principals (quoted or escaped when they hold a
    comma), or empty."""
    if text.count('"') % 2:
        return 'has an unclosed \'"\'; quote a principal that holds commas whole, e.g. "User:CN=a,O=b"'
    for principal in principal_list(text):
        why = principal_problem(principal)
        if why is not None:
            return f"has {why}; write them as User:NAME, comma-separated (quote a name that holds a comma)"
    return None


def _whole_problem(value: float) -> str | None:
    """Kafka's connection_creation_rate is an integer: the broker refuses 0.5 (error 42)."""
    if value != int(value):
        return (
            f"is {value:g}, and the broker refuses a fractional connection_creation_rate: give a whole number"
        )
    return None


def _java_options_problem(text: str) -> str | None:
    """Java options as Spark's extraJavaOptions takes them: split on spaces, no quoting."""
    if any(c in text for c in "\"'"):
        return "has a quote; give the options space-separated, without quotes"
    return None


_UNITS = {"k": 1, "m": 1024, "g": 1024**2, "t": 1024**3}  # in KiB


def memory_kib(size: str) -> int | None:
    """A JVM heap size as Spark writes it (``512m``, ``4g``) in KiB, or None if it is not one."""
    import re

    m = re.fullmatch(r"([1-9][0-9]*)([kmgt])", size.strip().lower())
    return int(m.group(1)) * _UNITS[m.group(2)] if m else None


def _memory_problem(size: str) -> str | None:
    """A JVM heap size as Spark writes it, at least Spark's minimum; or empty."""
    if size == "":
        return None
    kib = memory_kib(size)
    if kib is None:
        return "is not a memory size; write it as Spark does, e.g. 4g or 512m (empty: Spark's default, 1g)"
    if kib < 512 * 1024:
        return "is too small: Spark refuses a driver heap under about 450 MiB; give at least 512m"
    return None


SETTINGS: tuple[Setting, ...] = (
    # -- KIP-936 --------------------------------------------------------------------
    Setting(
        "producer.id.quota.window.size.seconds",
        int,
        3600,
        "KIP-936 default: quotas are PIDs per hour, the span of one metric sample.",
        "The window W of producer_ids_rate (PIDs per W) and of each metric sample; "
        "a PID is remembered at least W after it was last seen.",
        min=1,
        max=7 * 24 * 3600,
    ),
    Setting(
        "producer.id.quota.window.num",
        int,
        11,
        "KIP-936 default (Kafka's quota.window.num): about half a day of history at 1 h.",
        "How many samples of window.size the rate and throttle-time metrics keep.",
        min=1,
        max=1000,
    ),
    Setting(
        "producer.id.quota.cache.layer.count",
        int,
        4,
        "A PID is forgotten between W and W + W/4 after its last sighting; more layers "
        "tighten that at the cost of one more membership check each.",
        "Bloom layers per window: a new layer starts every W / layer.count of event time.",
        min=1,
        max=64,
    ),
    Setting(
        "producer.id.quota.cache.false.positive.rate",
        float,
        0.01,
        "1% lets at most ~1 in 100 unseen PIDs through as 'known' (never the reverse: "
        "a known PID is never throttled) for ~13 bits per PID with 4 layers.",
        "Target combined false-positive rate of a principal's live Bloom layers; each "
        "base layer is built for rate / (layer.count + 1).",
        min=0.0,
        max=0.5,
        min_exclusive=True,
    ),
    Setting(
        "producer.id.quota.cache.cleanup.scheduler.interval.ms",
        int,
        10,
        "KIP-936 default. In event time; dead layers are already ignored by lookups, "
        "so this only bounds how long their memory lingers.",
        "Minimum event time between passes that free a principal's expired layers.",
        min=1,
    ),
    # -- pidquota: inputs and outputs -------------------------------------------------
    Setting(
        "pidquota.input.format",
        str,
        "events",
        "pidquota's own JSON event is what the demo, the generator and every earlier run read.",
        "What the input is: the name of an input format. `pidquota formats` lists them, each "
        "with what it reads and where from: `events` (one JSON event per line), "
        "`kafka-request-log` (the brokers' request log: docs/real-cluster.md), ... "
        "(docs/formats.md). Same as --input-format.",
        check=_format_problem,
        shown_range="a format `pidquota formats` lists",
    ),
    Setting(
        "pidquota.audit.owners",
        str,
        "",
        "Empty: every topic is its own principal, Topic:<name>, until an owner is given.",
        'With --input-format record-batches, who owns each topic: a JSON file {"topics": '
        '{"orders": "User:alice", "pay-*": "User:bob"}} (a key ending in * is a prefix), or '
        "`redis`: the hash {PREFIX}:topic-owners in pidquota.redis.url. Read at start-up.",
    ),
    Setting(
        "pidquota.input.follow",
        str,
        "auto",
        "A broker appends to its live request log and rolls it hourly; event files are written once.",
        "Follow growing files: read new whole lines as they are appended, know a rolled "
        "(renamed) file as the same stream. auto: as the input format says (on for "
        "kafka-request-log, off for events; pidquota formats). "
        "Same as --follow / --no-follow.",
        choices=("auto", "true", "false"),
    ),
    Setting(
        "pidquota.request.log.timezone",
        str,
        "UTC",
        "log4j writes the broker JVM's local time without a zone; most brokers run in UTC.",
        "The brokers' time zone (IANA name, e.g. Europe/Berlin): how request-log times are read.",
        check=_zone_problem,
    ),
    Setting(
        "pidquota.request.log.message.fields",
        str,
        "message,log",
        "Filebeat and Vector put the line in `message`, Fluent Bit in `log`.",
        "In a log shipper's JSON record, the fields (dotted paths, first present wins) that hold "
        "the request-log line.",
    ),
    Setting(
        "pidquota.request.log.host.fields",
        str,
        "host.name,host,hostname",
        "Filebeat writes host.name, Vector host, syslog-style shippers hostname.",
        "In a log shipper's JSON record, the fields (dotted paths, first present wins) that name the broker.",
    ),
    Setting(
        "pidquota.quotas.file",
        str,
        "",
        "Empty means the quotas.json shipped next to this file, so the demo needs no setup.",
        'JSON quota file: {"users": {"User:alice": {"producer_ids_rate": 100}, '
        '"<default>": {...}}}. Read at start-up.',
    ),
    Setting(
        "pidquota.principal.max.length",
        int,
        256,
        "Kafka principals are short names; anything longer is more likely garbage than a user.",
        "Events whose principal is longer than this go to the dead letters.",
        min=1,
        max=65536,
    ),
    Setting(
        "pidquota.watermark.delay.ms",
        int,
        600_000,
        "10 minutes covers broker clock skew and a lagging broker: a principal is only "
        "evicted once the whole stream is that far past its expiry, so its stragglers "
        "still meet its state.",
        "How far the event-time watermark trails the newest event. Idle principals' state "
        "is evicted once the watermark passes their expiry. Late events are never dropped: "
        "they are judged at the principal's current time.",
        min=0,
    ),
    # -- pidquota: Kafka ---------------------------------------------------------------
    Setting(
        "pidquota.kafka.starting.offsets",
        str,
        "earliest",
        "A new query on a topic judges everything the topic holds; `latest` would skip "
        "what was produced before it started.",
        "Where a new query starts reading a Kafka input: earliest, latest, a timestamp in "
        'ms (ListOffsets by time), or a JSON map {"topic": {"0": offset}}. A query '
        "that resumes from its checkpoint ignores it.",
    ),
    Setting(
        "pidquota.kafka.fail.on.data.loss",
        bool,
        True,
        "Losing events silently would let a rogue client through unjudged; stop and say so.",
        "Fail the query when offsets it must read are gone (deleted by retention, topic "
        "truncated or recreated). false: skip the gap, log it and carry on.",
    ),
    Setting(
        "pidquota.kafka.fetch.timeout.ms",
        int,
        60_000,
        "Long enough to ride out a broker restart or leader election, short enough that "
        "a dead broker fails the query with a message within a few minutes (a task is tried "
        "4 times, so up to 4 of these).",
        "How long a read waits for data it knows exists before failing the read; the query fails "
        "once the task's 4 attempts have.",
        min=1000,
    ),
    Setting(
        "pidquota.kafka.request.timeout.ms",
        int,
        30_000,
        "kafka-python's default: a request to a broker that does not answer fails after 30 s.",
        "Timeout of one Kafka request (metadata, offsets, fetch) from the source.",
        min=100,
    ),
    Setting(
        "pidquota.kafka.connect.timeout.ms",
        int,
        5_000,
        "A reachable broker answers in well under a second, TLS and SASL included; an "
        "unreachable one is named within seconds instead of after Spark has started.",
        "How long `pidquota run` waits at start-up for the Kafka input's brokers to answer and "
        "list the topic, before it exits with one line naming HOST:PORT.",
        min=1000,
    ),
    Setting(
        "pidquota.kafka.isolation.level",
        str,
        "read_committed",
        "Events of a transaction that its producer aborted never happened; they must not be "
        "decided. (Kafka consumers default to read_uncommitted; that counts aborted traffic.)",
        "read_committed: events of aborted Kafka transactions are never read, and events of an "
        "open transaction wait for its COMMIT; worked out by pidquota from the log's transaction "
        "markers, so it works on any broker. read_uncommitted: every event as soon as it is written.",
        choices=("read_committed", "read_uncommitted"),
    ),
    Setting(
        "pidquota.kafka.transaction.timeout.ms",
        int,
        900_000,
        "Kafka's transaction.max.timeout.ms default (15 minutes): a broker with that default lets "
        "no transaction stay open longer, so a marker that has not come by then is not coming. "
        "Raise it with the brokers' transaction.max.timeout.ms.",
        "read_committed: how long events of a transaction wait for its COMMIT or ABORT marker "
        "(from when pidquota first sees the transaction) before they are treated as aborted, "
        "with a warning naming the producer and partition.",
        min=1000,
    ),
    Setting(
        "pidquota.kafka.decisions.topic",
        str,
        "",
        "Empty: decisions go to files only. Set it (or --decisions-topic) to also send them to Kafka.",
        "Kafka topic for decisions, keyed by principal.",
    ),
    Setting(
        "pidquota.kafka.metrics.topic",
        str,
        "",
        "Empty: metrics go to files only.",
        "Kafka topic for the per-principal metrics rows, keyed by principal.",
    ),
    Setting(
        "pidquota.kafka.dead.letters.topic",
        str,
        "",
        "Empty: dead letters go to files only.",
        "Kafka topic for dead letters (raw record, reason, source position).",
    ),
    Setting(
        "pidquota.kafka.sink.mode",
        str,
        "exactly-once",
        "A consumer of the decisions topic (a broker plug-in, an alert) must not see a throttle "
        "twice after a crash; every Kafka broker since 0.11 has transactions (KIP-98, KIP-447).",
        "How the Kafka output topics are written. exactly-once: each micro-batch's records in one "
        "Kafka transaction, with a transactional id stable per query, so a restarted or zombie run "
        "is fenced and a replayed batch is never sent twice (read the topics with "
        "isolation.level=read_committed). at-least-once: an idempotent producer without "
        "transactions, for brokers without them; a batch replayed after a crash is sent again.",
        choices=("exactly-once", "at-least-once"),
    ),
    Setting(
        "pidquota.kafka.sink.retry.ms",
        int,
        60_000,
        "A lost broker's partitions and coordinators move to another broker within seconds "
        "(broker.session.timeout.ms is 9 s); a minute rides that out, as the source's "
        "pidquota.kafka.fetch.timeout.ms does, and an output cluster that is really gone still "
        "stops the run within a few minutes.",
        "exactly-once: how long a micro-batch's Kafka send keeps trying after its first failure (a "
        "broker lost, a coordinator moved). Each try opens a fresh transactional producer, which aborts "
        "the failed transaction, and looks at the batch's mark first, so a batch whose commit did "
        "reach Kafka is not sent twice. 0: one try, then the run stops.",
        min=0,
    ),
    Setting(
        "pidquota.kafka.security.protocol",
        str,
        "PLAINTEXT",
        "Kafka's own default.",
        "security.protocol of the Kafka clients.",
        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    ),
    Setting(
        "pidquota.kafka.sasl.mechanism",
        str,
        "",
        "Empty unless the protocol is SASL_*.",
        "sasl.mechanism of the Kafka clients.",
        choices=("", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    ),
    Setting(
        "pidquota.kafka.sasl.username",
        str,
        "",
        "No authentication by default.",
        "SASL username.",
    ),
    Setting(
        "pidquota.kafka.sasl.password",
        str,
        "",
        "No authentication by default; prefer the environment variable to a file.",
        "SASL password. Never logged.",
        secret=True,
    ),
    Setting(
        "pidquota.kafka.ssl.cafile",
        str,
        "",
        "Empty: the system's trust store.",
        "CA certificate file for SSL/SASL_SSL.",
    ),
    # -- pidquota: Redis ---------------------------------------------------------------
    Setting(
        "pidquota.redis.url",
        str,
        "",
        "Empty: quotas come from the quota file and no throttle state is published.",
        "Redis for quotas (kafka-configs style) and per-user throttle state: "
        "redis://HOST:PORT/DB, or rediss:// for TLS. Same as --quota-store / --redis.",
    ),
    Setting(
        "pidquota.redis.username",
        str,
        "",
        "Redis ACL user; empty: the URL's, or the default user.",
        "Redis AUTH username.",
    ),
    Setting(
        "pidquota.redis.password",
        str,
        "",
        "Empty: no AUTH (or the URL's). Prefer the environment variable to a file.",
        "Redis AUTH password. Never logged.",
        secret=True,
    ),
    Setting(
        "pidquota.redis.ssl.ca.certs",
        str,
        "",
        "Empty: the system's trust store (only used with rediss://).",
        "CA certificate file for Redis TLS.",
    ),
    Setting(
        "pidquota.redis.prefix",
        str,
        "pidquota",
        "One Redis can serve several clusters, each under its own prefix.",
        "Prefix of every key pidquota reads or writes in Redis, used as the hash tag {PREFIX} "
        "(one Redis Cluster slot); no spaces or braces.",
    ),
    Setting(
        "pidquota.quota.refresh.ms",
        int,
        1000,
        "Below the 2 s trigger interval, so a quota change applies within one trigger; "
        "it costs one GET per second per worker.",
        "How often the enforcer checks Redis for changed quotas.",
        min=50,
    ),
    Setting(
        "pidquota.redis.publish.decisions",
        bool,
        True,
        "A broker plug-in or proxy asks Redis whether a user is throttled; with Redis "
        "configured, that answer should be there.",
        "Write per-user throttle state and metrics, in the user's event time, to pidquota.redis.url "
        "each batch (fenced per query run).",
    ),
    Setting(
        "pidquota.redis.state.ttl.ms",
        int,
        600_000,
        "Throttle state is in event time, so without an expiry a stopped run's throttles would stand "
        "for ever. Ten minutes outlast hundreds of triggers and a restart of the job; a stopped "
        "enforcer leaves nobody throttled for longer (brokers fail open, as with no quota).",
        "Each user's published state (its hash in Redis, and the index of users) expires this "
        "long, in wall-clock time, after the enforcer last published it: a user with no state is "
        "not throttled. 0: never expires. At least 3 trigger intervals.",
        min=0,
    ),
    # -- pidquota: Prometheus ----------------------------------------------------------
    Setting(
        "pidquota.prometheus.port",
        int,
        0,
        "Off unless asked for: a port is a resource on a shared host. The demo turns it on "
        "at 9464 (the port the OpenTelemetry Prometheus exporter is registered at).",
        "Serve the metrics at http://HOST:PORT/metrics from the driver for Prometheus to scrape "
        "(0: off). Same as run --prometheus-port.",
        min=0,
        max=65535,
    ),
    Setting(
        "pidquota.prometheus.host",
        str,
        "0.0.0.0",
        "A Prometheus on another host scrapes it, so listen on every interface, as "
        "exporters such as node_exporter do.",
        "The address the metrics endpoint listens on (127.0.0.1: this host only).",
    ),
    Setting(
        "pidquota.prometheus.max.users",
        int,
        1000,
        "Each labelled user is about 10 series; 1000 users is 10k series, within what one "
        "Prometheus scrape job carries comfortably.",
        "How many users get their own user label; every throttled user always does, the users "
        'with the most new PIDs fill the rest, and the others are summed into user="_other".',
        min=1,
    ),
    # -- pidquota: Spark ---------------------------------------------------------------
    Setting(
        "pidquota.spark.master",
        str,
        "local[2]",
        "This machine class has 2 cores; a cluster deployment gives its own master, which wins.",
        "Spark master URL, used only when nothing else gave one (pidquota run --master, "
        "spark-submit --master, spark.master in Spark's configuration).",
    ),
    Setting(
        "pidquota.spark.driver.memory",
        str,
        "",
        "Empty keeps Spark's default heap (1g), enough for the demo and for 100k principals "
        "(benchmarks/state_scale.py). Each batch's output rows are collected into the driver "
        "before they are written, and in local mode the executors share its heap: a first "
        "batch of 3M events from 1M principals died with 2g and ran with 4g.",
        "The driver JVM's heap (spark.driver.memory, e.g. 4g) when pidquota starts Spark "
        "itself; spark-submit's --driver-memory, PYSPARK_SUBMIT_ARGS, spark-defaults.conf or "
        "SPARK_DRIVER_MEMORY win. In local mode the executors run in the same JVM.",
        check=_memory_problem,
    ),
    Setting(
        "pidquota.spark.class.cache",
        str,
        "~/.cache/pidquota/jvm",
        "Spark's JVM loads about 21,000 classes at every start; mapped from a class-data "
        "archive (Java's AppCDS, about 180 MB, written once by the first run's JVM as it "
        "exits, checked before use): `pidquota run --once` over 12 small files took 28.2 s "
        "instead of 33.7 s on 2 cores (4 runs each). It sits beside the Kafka jars' cache.",
        "A folder for the class-data archive of a Spark JVM pidquota starts itself "
        "(streaming/class_data.py): one per Java and Spark version, written when the first "
        "JVM exits, mapped by the next ones. Empty turns it off. Not used under "
        "spark-submit or with spark.driver.extraJavaOptions of your own.",
    ),
    Setting(
        "pidquota.spark.java.options",
        str,
        "",
        "Empty: Java's own defaults, which suit a long run. A short one (a test, --once over a "
        "small input) spends a third of its CPU compiling code it will not run long: "
        "-XX:TieredStopAtLevel=1 took `pidquota run --once` over 12 small files from about 65 to "
        "about 50 CPU-seconds.",
        "Java options added to those pidquota gives the Spark JVM it starts itself (its logging "
        "and class-data archive stay), e.g. -XX:TieredStopAtLevel=1 or GC flags; space-separated, "
        "no quotes. Not used under spark-submit (give --driver-java-options there).",
        check=_java_options_problem,
    ),
    Setting(
        "pidquota.spark.python.installed",
        bool,
        True,
        "Spark puts its pyspark.zip first on every Python worker's path, and Python compiles "
        "what it imports from a zip anew in each worker (it caches no bytecode there): about "
        "0.8 CPU-seconds a worker. A streaming query starts a fresh one for its Python data "
        "source, so a query's start took 1.4 s where it takes 0.5 s with the installed copy, and "
        "an in-process query of 100 events 4.6 CPU-seconds where it takes 2.8.",
        "Spark's Python workers import the PySpark installed beside pidquota (with its compiled "
        "bytecode) instead of the same code in $SPARK_HOME/python/lib/pyspark.zip, when that "
        "zip is this installation's (streaming/worker_site/sitecustomize.py, given to the "
        "workers through spark.executorEnv.PYTHONPATH, on a local master only: a cluster's nodes keep "
        "their own PYTHONPATH). false: the workers' path as Spark sets it.",
    ),
    Setting(
        "pidquota.spark.shuffle.partitions",
        int,
        2,
        "One per core of this 2-core machine class: a stateful micro-batch pays per "
        "partition (a task and a state-store version each), and 2 measured 5% faster "
        "than 4 (benchmarks/streaming.py). The state store keeps one store per partition, "
        "so changing it later needs a new checkpoint.",
        "spark.sql.shuffle.partitions: partitions of the per-principal state.",
        min=1,
        max=10000,
    ),
    Setting(
        "pidquota.state.store",
        str,
        "rocksdb",
        "Measured with 10k and 100k active principals (benchmarks/state_scale.py): batch times "
        "within 15% of each other (RocksDB 14% slower at 10k, 8% faster at 100k) and the same bytes "
        "on disk and per batch, but the HDFS-backed store keeps "
        "the state in the executor's JVM heap (62 MiB more heap at 100k principals, growing with "
        "them) where RocksDB keeps it off the heap, so RocksDB scales without resizing executors.",
        "Spark's state store: hdfs (HDFSBackedStateStoreProvider, state in the executors' JVM heap) "
        "or rocksdb (RocksDBStateStoreProvider with changelog checkpointing, state in RocksDB off the "
        "heap). The checkpoint records it, so changing it later needs a new checkpoint.",
        choices=("hdfs", "rocksdb"),
    ),
    Setting(
        "pidquota.state.buckets",
        int,
        64,
        "PySpark's stateful operator costs about a millisecond per group and batch, whatever "
        "the group holds: 500 active principals as 500 groups cost 0.5 s a batch before any "
        "quota logic (benchmarks/streaming.py). 64 groups bound that, while a batch that "
        "touches a group rewrites only that group's principals' state. 0 keeps one group per "
        "principal. Decisions are the same for every value; the checkpoint records it, so "
        "changing it later needs a new checkpoint.",
        "Groups of principals in the stateful operator (0: one per principal).",
        min=0,
        max=100000,
    ),
    Setting(
        "pidquota.compiled.after",
        int,
        20_000,
        "numba's import and a kernel's machine code cost a process about 0.6-0.7 CPU-s to load: a "
        "pidquota run --once over 4,800 events spent about a tenth of its CPU loading them in two "
        "Spark Python workers and its driver for nothing (docs/development.md). Before the load the "
        "numpy judge and the Arrow writer give the same verdicts and bytes, ~2.5 us a sighting "
        "slower: 20,000 sightings cost ~50 ms more, less than the load.",
        "Sightings a Spark Python worker judges, and rows the driver writes, before it loads the "
        "compiled judge or JSON writer (numba); 0 loads them at the first batch. Decisions and "
        "outputs are the same for every value.",
        min=0,
        max=10**12,
    ),
    Setting(
        "pidquota.state.layout",
        str,
        "groups",
        "groups is the faster layout while the state is small: a touched group is rewritten whole, "
        "but without a round trip to the JVM per principal. A batch touching 1% of 1M principals "
        "rewrites all 428 MiB of it; principals writes what it touched "
        "(benchmarks/state_scale.py, docs/cluster.md#state-at-scale). Checkpoints from before the "
        "setting are groups.",
        "How the per-principal state is kept: groups (applyInPandasWithState, each group of "
        "pidquota.state.buckets principals one state row, rewritten whole when touched) or principals "
        "(transformWithStateInPandas, each principal its own entry, so a batch writes only the "
        "principals it touched; needs pidquota.state.store=rocksdb). Decisions are the same; the "
        "checkpoint records it, so changing it later needs a new checkpoint.",
        choices=("groups", "principals"),
    ),
    Setting(
        "pidquota.output.roll.ms",
        int,
        3_600_000,
        "One file per batch is ~43,000 files a day per kind at a 2 s trigger; an hour per file "
        "is 24, and still small enough to open.",
        "Once a kind's oldest per-batch file is this old, the files of the batches before the "
        "current one are joined into one roll-FIRST-LAST.jsonl (0: one file per batch, kept).",
        min=0,
    ),
    Setting(
        "pidquota.output.retention.ms",
        int,
        7 * 24 * 3_600_000,
        "Kafka's own retention.ms default: a week of decisions to look back on, and a disk "
        "that does not fill.",
        "Output files last written longer ago than this are deleted (0: keep everything).",
        min=0,
    ),
    Setting(
        "pidquota.mode",
        str,
        "enforce",
        "A run enforces unless told otherwise; shadow is how a new quota is tried out first.",
        "enforce: publish throttles where brokers and proxies look (Redis). shadow: compute and "
        "write everything, marked mode=shadow, and publish to Redis only under a separate "
        "shadow: key space. Same as run --shadow.",
        choices=("enforce", "shadow"),
    ),
    # -- the actuator (actuate/, docs/enforcing.md) --------------------------------------
    Setting(
        "pidquota.actuator",
        str,
        "off",
        "Changing a cluster's quotas or ACLs is the operator's call: off until asked, and "
        "dry-run first shows what would be done.",
        "What the run does to the principals it throttles, through Kafka's own controls on "
        "pidquota.actuator.bootstrap. off: nothing. dry-run: the actions it would take, written to "
        "OUTPUT/actions and logged, with nothing read or changed on the cluster. on: the actions "
        "taken (journalled first, undone exactly once the throttle and the hold are over, or when "
        "the run stops).",
        choices=("off", "dry-run", "on"),
    ),
    Setting(
        "pidquota.actuator.bootstrap",
        str,
        "",
        "Empty: the cluster the run already talks to (its Kafka input, else its output topics); "
        "a file input names the cluster here.",
        "The Kafka cluster whose controls the actuator sets: HOST[:PORT][,HOST[:PORT]...] or "
        "kafka://HOST[:PORT]. Its security is pidquota.kafka.security.protocol and the sasl and "
        "ssl settings. pidquota's principal needs ALTER_CONFIGS and DESCRIBE_CONFIGS on the Cluster "
        "(quotas), ALTER and DESCRIBE on the Cluster (ACLs), and its journal topic "
        "(docs/enforcing.md).",
    ),
    Setting(
        "pidquota.actuator.mechanism",
        str,
        "auto",
        "Where every broker runs pidquota's plug-in it refuses the offender's new PIDs and nothing "
        "else (docs/broker-plugin.md). Elsewhere, measured on Apache Kafka 4.1.1 (docs/enforcing.md): request-quota cut PID floods 3-20x "
        "and slowed no other user; with the connection rate on the offender's own address its "
        "kafka-python loops fell to 0-12 PIDs a minute, still with no other user slowed; without "
        "client addresses (JSON events) it is request-quota. DENY ACLs stopped every user's "
        "writes on a cluster with allow.everyone.if.no.acl.found=true, and the offender's alone "
        "(its steady producer too) where every user is granted explicitly.",
        "request-quota: the user's request_percentage client quota (KIP-546), which delays its "
        "responses, InitProducerId included. request-quota+connection-rate: the same, and "
        "connection_creation_rate (KIP-612) on each client address the user has to itself (no "
        "other user's PID came from it; the request log names the address). deny-writes: DENY "
        "ACLs on the user's IDEMPOTENT_WRITE and WRITE, a circuit breaker that also stops its "
        "steady producers. auto: broker-plugin when every broker runs pidquota's plug-in "
        "(their authorizer.class.name), else request-quota+connection-rate. broker-plugin: the user's entry in the state topic of pidquota's broker "
        "plug-in (docs/broker-plugin.md), which refuses its new PIDs on every broker that runs it.",
        choices=("auto", "request-quota", "request-quota+connection-rate", "deny-writes", "broker-plugin"),
    ),
    Setting(
        "pidquota.actuator.plugin.topic",
        str,
        "pidquota-throttle-state",
        "The plug-in's own default (pidquota.plugin.topic on the brokers).",
        "The compacted topic the broker plug-in reads its throttle set and pidquota's heartbeat "
        "from (mechanism broker-plugin); created if missing, with ACLs for pidquota's principal.",
    ),
    Setting(
        "pidquota.actuator.plugin.narrow",
        bool,
        True,
        "A crash loop is usually one application of a user; its other applications (a deploy, a "
        "batch job) should still start producers. Where the flood is spread over many client ids, "
        "only the whole user binds.",
        "With the broker-plugin mechanism, refuse new PIDs to the flooding client ids of a "
        "throttled user alone (those that make 80% of its throttled new PIDs, at most 3; the request "
        "log and events name them), else to the whole user; the closed loop "
        "(pidquota.actuator.escalation) refuses the whole user when the narrowed throttle still "
        "lets over twice its quota through.",
    ),
    Setting(
        "pidquota.actuator.plugin.status.topic",
        str,
        "pidquota-plugin-status",
        "The plug-in's own default (pidquota.plugin.status.topic on the brokers).",
        "The compacted topic where each broker's plug-in reports whether it obeys pidquota's state "
        "(mechanism broker-plugin): the run says a broker that does not, within 30 s, and "
        "`pidquota actuator status` shows each. Created if missing; the plug-in's principal needs "
        "WRITE on it (a super user has it).",
    ),
    Setting(
        "pidquota.actuator.plugin.others.may.write",
        bool,
        False,
        "Who may write the state topic decides whom every broker refuses: a principal that may "
        "write it can refuse any user new PIDs, or lift pidquota's throttles.",
        "With the broker-plugin mechanism, act through a state topic that principals other than "
        "pidquota's may write (an ALLOW ACL of another principal, a wildcard or prefixed one, or "
        "no ACL where the brokers allow everyone); and act on the plug-in's inits topic as input "
        "when others than the brokers may write it (who may can have any user throttled): each "
        "is said at every start. false: such a topic is refused at start, with the ACL that lets whom.",
    ),
    Setting(
        "pidquota.actuator.plugin.brokers.principal",
        str,
        "",
        "The brokers write the inits topic as super users, with no ACL; a plug-in given credentials "
        "of its own (pidquota.plugin.consumer.sasl.*) writes it through a WRITE ACL, which the start-up "
        "check would otherwise count as another writer, and refuse.",
        "The principal the brokers' plug-in publishes its inits as, when it is not a super user "
        "(User:NAME): its ALLOW WRITE ACL on the inits topic is the brokers', not another "
        "principal's. Empty: every WRITE ACL on that topic is another's.",
        check=lambda text: None if not text.strip() else principal_problem(text.strip()),
    ),
    Setting(
        "pidquota.actuator.plugin.hand.over",
        bool,
        True,
        "A restart lifted every throttle and the next run took about a minute to throttle again: "
        "about 500 PIDs of a crash loop went through in the gap. Handed over, the brokers obey the "
        "throttles until the last heartbeat is over its bound, and a run that starts within it "
        "keeps them without a gap.",
        "With the broker-plugin mechanism, a run that stops normally leaves its plug-in throttles "
        "(journalled) for the next run instead of lifting them, and stops its heartbeat: the "
        "brokers refuse nothing once it is pidquota.actuator.plugin.heartbeat.ms old, unless a run "
        "starts before and keeps them; `pidquota actuator lift` ends them at once. false: the run's "
        "end lifts them, as every other mechanism's does.",
    ),
    Setting(
        "pidquota.actuator.plugin.heartbeat.ms",
        int,
        60_000,
        "A minute: a run that is gone stops being obeyed within a minute (the plug-in fails "
        "open), and a heartbeat every 15 s rides out a few failed writes and a clock skew of seconds.",
        "How old pidquota's heartbeat in the plug-in's state topic may be before the brokers' "
        "plug-in refuses nothing (a beat is written every quarter of it).",
        min=5_000,
        max=3_600_000,
    ),
    Setting(
        "pidquota.actuator.connection.rate",
        float,
        1.0,
        "One new connection a second, measured: a crash loop needs one per restart, so its new "
        "PIDs fell to a few a minute; connections already open are not touched.",
        "connection_creation_rate (new connections per second, per broker) that "
        "request-quota+connection-rate sets on an offender's own client address (a whole "
        "number: Kafka refuses a fractional one).",
        min=1,
        max=1_000_000,
        check=_whole_problem,
    ),
    Setting(
        "pidquota.actuator.request.percentage",
        float,
        1.0,
        "1% of one network and I/O thread, measured: the offenders' PIDs per minute fell 3-20x, "
        "its steady producer kept a trickle (49 to 4 records/s), other users were untouched.",
        "request_percentage the request-quota mechanism sets on an offending user (percent of one "
        "broker thread's time, per broker).",
        min=0.01,
        max=10000,
    ),
    Setting(
        "pidquota.actuator.escalation",
        bool,
        True,
        "Stock controls delay a grant, they cannot refuse it, so what they achieve differs by "
        "client and address (measured: 98 of 103 PIDs a minute kept by a librdkafka loop on a "
        "shared address); pidquota sees what the brokers still grant, so it can check.",
        "The closed loop, for request-quota and request-quota+connection-rate: a principal acted "
        "on that still gets over twice its quota per window is stepped up (a lower "
        "request_percentage on its flooding client ids, then, where allowed, deny-writes), and "
        "stepped down as its rate falls (docs/enforcing.md). Each step is journalled and undone "
        "exactly.",
    ),
    Setting(
        "pidquota.actuator.escalation.settle.ms",
        int,
        30_000,
        "Long enough for a crash loop to restart a few times at the throttled pace (a Kafka "
        "quota's delay is at most one quota window, 1 s by default), short enough to step up "
        "within a minute.",
        "How long each measure of the closed loop lasts: a step is judged on the new PIDs the "
        "brokers granted over it (a step down waits twice as long after each bounce).",
        min=5_000,
        max=3_600_000,
    ),
    Setting(
        "pidquota.actuator.escalation.request.percentage",
        float,
        0.1,
        "A tenth of the first step's 1%: Kafka's delay for it reaches its cap (one quota window) "
        "for any client, a cheap librdkafka loop too.",
        "request_percentage of the closed loop's first step, set on each of the user's flooding "
        "client ids as a (user, client-id) quota, which Kafka puts before the user's own: its "
        "other applications keep the user's quota. Below pidquota.actuator.request.percentage "
        "(checked at start: a higher one would loosen the user's quota).",
        min=0.01,
        max=10000,
    ),
    Setting(
        "pidquota.actuator.escalation.deny.writes",
        bool,
        False,
        "DENY ACLs also stop the user's steady producers, and on a cluster with "
        "allow.everyone.if.no.acl.found=true they close every topic to every user: the operator "
        "must ask for it.",
        "Let the closed loop's last step add deny-writes' ACLs (a circuit breaker) when the "
        "first step does not hold the user within twice its quota; used only where every broker "
        "has allow.everyone.if.no.acl.found=false, else said at start and not used.",
    ),
    Setting(
        "pidquota.actuator.hold.ms",
        int,
        300_000,
        "A crash loop pauses between restarts; five minutes past the throttle's end keeps the "
        "control from being lifted and set again at each pause.",
        "How long a principal stays acted on after its throttle ends (wall clock).",
        min=0,
    ),
    Setting(
        "pidquota.actuator.max.principals",
        int,
        10,
        "A bound on the harm of a wrong quota: at most ten users slowed at once, the rest reported capped.",
        "The most principals acted on at once; the longest throttled come first.",
        min=1,
    ),
    Setting(
        "pidquota.actuator.allow",
        str,
        "User:ANONYMOUS",
        "User:ANONYMOUS is every client of a listener that authenticates no one: acting on it "
        "acts on all of them.",
        "Comma-separated principals never acted on, such as the brokers' own principal and "
        "admin users (User:NAME).",
        check=_principals_problem,
    ),
    Setting(
        "pidquota.actuator.journal.topic",
        str,
        "pidquota-actuator-journal",
        "One compacted topic on the cluster it acts on outlives pidquota, even a kill -9, "
        "with no other store to run.",
        "The compacted topic where the actuator records each change, and the operator's value "
        "before it, ahead of making it; created if missing.",
    ),
    Setting(
        "pidquota.actuator.principal",
        str,
        "",
        "Under allow.everyone.if.no.acl.found=true any user may write a topic without ACLs, and "
        "the journal tells pidquota what to undo; with SASL PLAIN or SCRAM the login is the "
        "principal, so nothing needs setting there.",
        "pidquota's own principal (User:NAME): when the actuator creates its journal topic, it "
        "allows only this principal to read and write it and its transactional id (ACLs). Empty: "
        "User:<pidquota.kafka.sasl.username> under SASL PLAIN or SCRAM, else no ACLs and a warning.",
        check=lambda text: None if not text.strip() else principal_problem(text.strip()),
    ),
    Setting(
        "pidquota.replay.until",
        str,
        "",
        "Empty: every event is enforced. A replay is asked for when state was lost.",
        "Events before this time (epoch ms, or now: when the checkpoint is created) only rebuild "
        "state: their rows are marked replay=true and nothing of them is published. The "
        "checkpoint keeps the time, so a restart never replays newer events. Same as run "
        "--replay-until; run --rebuild is --replay-until now.",
    ),
    Setting(
        "pidquota.checkpoint.location",
        str,
        "",
        "Empty means OUTPUT/_checkpoint, so re-running on the same output resumes.",
        "Spark checkpoint directory (offsets and the per-principal state).",
    ),
    Setting(
        "pidquota.trigger.interval.ms",
        int,
        2000,
        "Short enough that a throttle decision lands within seconds, long enough that "
        "a local micro-batch (~0.5 s) is not back to back.",
        "Processing-time trigger interval of a long-running query (ignored with --once).",
        min=0,
    ),
    Setting(
        "pidquota.max.events.per.trigger",
        int,
        0,
        "0 means no limit; set it to bound batch latency when catching up on a backlog.",
        "Upper bound on events read per micro-batch (file inputs: files per trigger).",
        min=0,
    ),
    Setting(
        "pidquota.log.level",
        str,
        "WARN",
        "Spark is chatty at INFO, and even at WARN every start prints lines that say nothing "
        "about the run; pidquota prints its own summary.",
        "Spark log level, through conf/log4j2.properties, which also drops the routine warnings of "
        "every start (INFO shows Spark's own progress lines).",
        choices=("ERROR", "WARN", "INFO", "DEBUG"),
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
