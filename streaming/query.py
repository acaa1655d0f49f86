"""Build the streaming query: source -> parse -> per-principal state -> sink."""

from __future__ import annotations

import functools
from pathlib import Path

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.state import GroupStateTimeout

import pidquota.formats as formats
from pidquota.conf import formats as registry
from pidquota.conf.errors import ConfigError
from pidquota.conf.loader import Config
from pidquota.conf.paths import local_path
from pidquota.formats.folded import FOLDED, KIND_DEAD, KIND_EVENT
from pidquota.formats.folded import OPTION as SCREEN_OPTION
from pidquota.quota import QuotaSettings, QuotaSource
from pidquota.sources import stopping
from pidquota.store.kafka import security_options
from pidquota.streaming.columns import DEAD_PRINCIPAL
from pidquota.streaming.compact import COMPACT_SCHEMA, compact
from pidquota.streaming.operator import make_state_function
from pidquota.streaming.schema import OPERATOR_SCHEMA, STATE_SCHEMA
from pidquota.streaming.session import checkpoint_files

COMPACT_COLUMNS = ("principal", "producer_ids", "timestamps", "epochs", "client_pids", "clients", "dead")

# Spark drops rows older than the watermark before a stateful operator with
# event-time timeouts, silently. The contract instead judges late events at
# the principal's current time. So the operator's watermark-tagged column is a
# NULL timestamp: Spark's late-row filter (`late_guard <= watermark`) is NULL
# for every row and drops none, while the watermark itself is still computed
# from event time upstream and drives eviction. A test pins this behaviour.


def input_format(config: Config) -> dict[str, str]:
    """The sources' options for ``pidquota.input.format``: the format's name and what its
    screen needs from the settings (``pidquota.formats``)."""
    return formats.get(config["pidquota.input.format"]).options(config)


def follows(config: Config) -> bool:
    """Whether a file input is followed as it grows (``pidquota.input.follow``)."""
    from pidquota.sources.follow import follows as following

    return following(config)


def _needs_screen(fmt: dict | None, screen: int) -> None:
    if fmt and formats.of_options(fmt).strict is None and not screen:
        raise ConfigError(
            f"--input-format {formats.of_options(fmt).entry.name} is read by the source's screen alone; "
            "give screen= the principal limit"
        )


def file_source(
    spark,
    path: str,
    max_files: int,
    checkpoint: str,
    stop_flag: str = "",
    screen: int = 0,
    fmt: dict | None = None,
    follow: bool = False,
) -> DataFrame:
    """A file, or a folder of them, as a stream of ``value`` lines
    (``sources/files.py``: a fixed order, and every file named is read).
    ``screen`` (the principal length limit) makes the source screen its lines
    itself (``formats/events.py``), for :func:`enforcer`; ``fmt``: the input format's
    options (:func:`input_format`); ``follow``: read the new lines of growing files."""
    _needs_screen(fmt, screen)
    refused = formats.of_options(fmt or {}).entry.refuses("file", f"file input {path!r}")
    if refused:
        raise ConfigError(refused)
    from pidquota.sources.files import FilesDataSource
    from pidquota.sources.listing import LEDGER, check_input

    check_input(path)
    p = Path(path)
    where = local_path(checkpoint)
    if where is None:
        raise ConfigError(
            f"a file input keeps the list of files it has read beside its checkpoint, which must be a "
            f"local (or mounted) folder; {checkpoint!r} is not. Use a path or a file:// URI"
        )
    spark.dataSource.register(FilesDataSource)
    reader = (
        spark.readStream.format("pidquota-files")
        .option("path", str(p.resolve()))
        .option("ledger", str(where / LEDGER))
        .option(
            "parallelism", spark.sparkContext.defaultParallelism
        )  # about one partition per core (files.partitions_of)
    )
    if max_files:
        reader = reader.option("maxFilesPerTrigger", max_files)
    if follow:
        reader = reader.option("follow", "true")
    reader = reader.options(**(fmt or {}))
    if stop_flag:
        reader = reader.option(stopping.OPTION, stop_flag)
    if screen:
        return reader.option(SCREEN_OPTION, screen).load()
    return reader.load().select(F.col("value").cast("string").alias("value"), "source_file")


def kafka_source(spark, url, config, stop_flag: str = "", screen: int = 0) -> DataFrame:
    """A Kafka topic as a stream of ``value`` lines plus the record's position and time
    (``screen``: screened in the source, as :func:`file_source`, in the configured
    input format)."""
    fmt = input_format(config)
    _needs_screen(fmt, screen)
    options = {
        **fmt,
        "kafka.bootstrap.servers": url.bootstrap,
        "subscribe": url.topic,
        "startingOffsets": config["pidquota.kafka.starting.offsets"],
        "failOnDataLoss": str(config["pidquota.kafka.fail.on.data.loss"]).lower(),
        "fetchTimeoutMs": str(config["pidquota.kafka.fetch.timeout.ms"]),
        "requestTimeoutMs": str(config["pidquota.kafka.request.timeout.ms"]),
        "kafka.isolation.level": config["pidquota.kafka.isolation.level"],
        "transactionTimeoutMs": str(config["pidquota.kafka.transaction.timeout.ms"]),
        **security_options(config),
    }
    outputs = [config[f"pidquota.kafka.{t}.topic"] for t in ("decisions", "metrics", "dead.letters")]
    options["excludeTopics"] = ",".join(t.rpartition("/")[2] for t in outputs if t)  # from * patterns
    if stop_flag:
        options[stopping.OPTION] = stop_flag
    if screen:
        options[SCREEN_OPTION] = str(screen)
    if config["pidquota.max.events.per.trigger"]:
        options["maxOffsetsPerTrigger"] = str(config["pidquota.max.events.per.trigger"])
    # (Spark lower-cases these keys on the way to the reader, which expects that.)
    return spark.readStream.format("pidquota-kafka").options(**options).load()


def screened(lines: DataFrame, max_principal: int, fmt=None) -> DataFrame:
    """Lines to the operator's input: one row per principal with its sightings
    (``COMPACT_SCHEMA``), or a dead letter, plus ``max_ts``.

    A source that screened its lines in its format (``fmt``, ``pidquota.formats``) hands over
    folded rows, the rows its format judged, and the lines left unchecked; lines no source
    screened (the demo's) are the default format's, JSON events, screened here. The
    unchecked lines take the format's strict parse, whose expressions see NULL for the
    other rows and cost next to nothing there; a format without one leaves none."""
    folded = {n for n, _ in FOLDED}
    others = [c for c in lines.columns if c != "value" and c not in folded]
    if "check" in lines.columns:  # the source screened its lines itself (formats/folded.py OPTION)
        out, fmt = lines, fmt or formats.get(registry.DEFAULT)
    else:
        fmt = formats.get(registry.DEFAULT)
        binary = lines.select(F.col("value").cast("binary").alias("value"), *others)
        line_schema = to_arrow_schema(binary.schema)
        options = {formats.OPTION: fmt.entry.name, SCREEN_OPTION: str(max_principal)}
        schema = fmt.screen(line_schema, max_principal, options).schema
        screen = functools.partial(formats.screened, line_schema=line_schema, options=options)
        out = binary.mapInArrow(screen, from_arrow_schema(pa.schema(list(schema))))
    strict_parse = formats.strict_of(fmt)
    if strict_parse is None:
        return _judged(out)
    unchecked, merged = _strict_columns(tuple(others), lines.sparkSession.sparkContext.applicationId)
    parsed = strict_parse(out.select(*unchecked), max_principal, keep=tuple(n for n, _ in FOLDED))
    return parsed.select(*merged)


@functools.lru_cache(maxsize=16)
def _strict_columns(others: tuple[str, ...], context: str) -> tuple[tuple[Column, ...], tuple[Column, ...]]:
    """:func:`screened`'s columns around the strict parse: the unchecked lines' (``value`` null
    where the screen checked the line), and the merge of the strict parse's rows with the
    screen's. Built once per shape and SparkContext (``context``): each query of a session
    reuses them (a test session starts hundreds)."""
    check = F.col("check")
    unchecked = (
        F.when(check, F.col("value").cast("string")).alias("value"),
        *(F.col(c) for c in others),
        *(F.col(n) for n, _ in FOLDED),
    )
    event = check & (F.col("kind") == KIND_EVENT)
    named = event & F.col("client").isNotNull()
    dead = F.when(check & (F.col("kind") == KIND_DEAD), F.to_json(F.struct("raw", "reason", "source")))
    dead = dead.otherwise(F.col("f_dead"))  # judged by the format's screen itself
    merged = (
        F.when(check, F.col("principal")).otherwise(F.col("f_principal")).alias("principal"),
        F.when(event, F.array("producer_id")).otherwise(F.col("f_producer_ids")).alias("producer_ids"),
        F.when(event, F.array("timestamp")).otherwise(F.col("f_timestamps")).alias("timestamps"),
        F.when(event, F.array("producer_epoch")).otherwise(F.col("f_epochs")).alias("epochs"),
        F.when(named, F.array("producer_id")).otherwise(F.col("f_client_pids")).alias("client_pids"),
        F.when(named, F.array("client")).otherwise(F.col("f_clients")).alias("clients"),
        dead.alias("dead"),
        F.when(check, F.col("timestamp")).otherwise(F.col("f_max_ts")).alias("max_ts"),
    )
    return unchecked, merged


def _judged(out: DataFrame) -> DataFrame:
    """A screened stream whose format's screen judged every line (no strict parse)."""
    return out.select(
        *(F.col(f"f_{n}").alias(n) for n in ("principal", "producer_ids", "timestamps")),
        F.col("f_epochs").alias("epochs"),
        F.col("f_client_pids").alias("client_pids"),
        F.col("f_clients").alias("clients"),
        F.col("f_dead").alias("dead"),
        F.col("f_max_ts").alias("max_ts"),
    )


def state_group(buckets: int):
    """The operator's group of a row: its principal (``buckets`` = 0), or one of
    ``buckets`` groups by a hash of the principal (``quota/states.py``). Dead
    letters (principal ``DEAD_PRINCIPAL``) keep their own group."""
    principal = F.col("principal")
    if buckets == 0:
        return principal
    bucket = F.concat(F.lit("#"), F.pmod(F.xxhash64(principal), F.lit(buckets)).cast("string"))
    return F.when(principal == DEAD_PRINCIPAL, principal).otherwise(bucket)


def strict(lines: DataFrame, max_principal: int) -> DataFrame:
    """The same rows as :func:`screened`, every line through Spark's strict parse
    and then folded (the path before the screen; benchmarks compare the two)."""
    events = formats.strict_of(formats.get(registry.DEFAULT))(lines, max_principal)
    dead = F.when(F.col("kind") == KIND_DEAD, F.to_json(F.struct("raw", "reason", "source")))
    inputs = events.select(
        "principal", "producer_id", "producer_epoch", "timestamp", "client", dead.alias("dead")
    )
    return inputs.mapInArrow(compact, COMPACT_SCHEMA)


def enforcer(
    lines: DataFrame,
    config: Config,
    quotas: QuotaSource,
    screen: bool = True,
    replay_until: int | None = None,
) -> DataFrame:
    """The enforcer's rows from a stream of lines: the operator's (``OPERATOR_SCHEMA``), one
    per principal per batch with its verdicts packed (``columns.PACKED``), the dead letters and the skipped counts. The sinks make
    them output rows (``OUTPUT_SCHEMA``) in Arrow: ``streaming/outputs/rows.py``.
    ``screen=False`` parses every line strictly (slower, same decisions);
    ``replay_until``: events before it only rebuild state (``streaming/replay.py``)."""
    settings = QuotaSettings.from_config(config)
    grouped = operator_input(lines, config, screen)
    addresses = acts_by_address(config)
    compiled_after = config["pidquota.compiled.after"]
    if config["pidquota.state.layout"] == "principals":  # one state entry per principal
        from pidquota.streaming.principals import PrincipalProcessor

        principals_layout_needs(lines.sparkSession)
        processor = PrincipalProcessor(quotas, settings, replay_until, addresses, compiled_after)
        judged = grouped.transformWithStateInPandas(processor, OPERATOR_SCHEMA, "Append", "EventTime")
    else:
        judge = make_state_function(quotas, settings, replay_until, addresses, compiled_after)
        judged = grouped.applyInPandasWithState(
            judge, OPERATOR_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout
        )
    return judged


def acts_by_address(config: Config) -> bool:
    """Whether the actuator may put a connection rate on client addresses (its mechanism
    ``request-quota+connection-rate``, or ``auto``, which may pick it): then every principal's
    addresses go to its address book, the unlimited ones' too (``columns.SEEN_ADDRESSES``)."""
    return config["pidquota.actuator"] != "off" and config["pidquota.actuator.mechanism"] in (
        "auto",
        "request-quota+connection-rate",
    )


def operator_input(lines: DataFrame, config: Config, screen: bool = True):
    """What the stateful operator reads: the lines screened (or parsed strictly) and folded one
    row per principal per input partition, under the watermark, grouped by state group."""
    delay = config["pidquota.watermark.delay.ms"]
    limit = config["pidquota.principal.max.length"]
    fmt = formats.get(config["pidquota.input.format"])
    folded = screened(lines, limit, fmt) if screen else strict(lines, limit)
    folded = folded.withColumn("event_time", F.timestamp_millis("max_ts")).withWatermark(
        "event_time", f"{delay} milliseconds"
    )
    guard = F.lit(None).cast("timestamp").alias("late_guard", metadata={"spark.watermarkDelayMs": delay})
    group = state_group(config["pidquota.state.buckets"]).alias("group")
    return folded.select(group, *COMPACT_COLUMNS, guard).groupBy("group")


def principals_layout_needs(spark) -> None:
    """Refuse ``pidquota.state.layout=principals`` where it cannot run, before the query
    starts (``pidquota run`` checks the store before Spark starts; this covers every caller)."""
    import importlib.util

    provider = spark.conf.get("spark.sql.streaming.stateStore.providerClass", "")
    if not provider.endswith("RocksDBStateStoreProvider"):
        raise ConfigError(
            f"pidquota.state.layout=principals needs Spark's RocksDB state store (pidquota.state.store=rocksdb); "
            f"this session's is {provider.rpartition('.')[2] or 'not set'}. Set pidquota.state.store=rocksdb, or "
            "keep pidquota.state.layout=groups"
        )
    if importlib.util.find_spec("google.protobuf") is None:
        raise ConfigError(
            "pidquota.state.layout=principals needs the protobuf package, which PySpark's state API uses: "
            "pip install 'protobuf>=6.33.5,<7' (pidquota's own install brings it), or keep "
            "pidquota.state.layout=groups"
        )


def start(output: DataFrame, sink, checkpoint: str, once: bool, trigger_ms: int, name: str = "pidquota"):
    checkpoint_files(output.sparkSession, checkpoint)
    writer = output.writeStream.queryName(name).foreachBatch(sink).option("checkpointLocation", checkpoint)
    if once:
        writer = writer.trigger(availableNow=True)
    elif trigger_ms:
        writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
    return writer.start()
