"""The input formats pidquota reads: the registry, one line per format.

What a format *does* (recognise its lines, screen them into sightings) is its module's,
``pidquota.formats.<module>``, behind the protocol of ``pidquota/formats/__init__.py``.
What the house must know of it before anything is read lives here, once: its name (the
value of ``--input-format`` and ``pidquota.input.format``), its words for ``--help`` and the
settings' docs, the inputs it comes from, and whether a file input of it is followed by
default. The settings, the CLI, the sniffer and ``pidquota formats`` read this table;
adding a format is its module and one line here.

Spark-free and import-free, so the settings can name the choices at start-up.

Worked example: ``entry("kafka-request-log").follow`` is True (a broker appends to its live
log), ``entry("record-batches").inputs`` is ``("kafka",)`` (batch headers come from topics),
and ``entry("parquet")`` raises ``ConfigError("--input-format 'parquet' is not a format
pidquota reads; give one of events, kafka-request-log, ...")``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pidquota.conf.errors import ConfigError


@dataclass(frozen=True)
class Entry:
    """One format's line in the registry."""

    name: str  # --input-format NAME
    module: str  # the module under pidquota.formats that reads it
    noun: str  # what its records are, in the sniffer's lines: "JSON events"
    help: str  # one phrase for --help, the settings' docs and `pidquota formats`
    inputs: tuple[str, ...] = ("file", "kafka")  # the inputs it may come from
    follow: bool = False  # a file input of it is followed (tail -F) unless told otherwise
    clients: tuple[str, ...] = ()  # the client identity it can give (pidquota.quota.client.COLUMNS)
    own_topic: bool = False  # its Kafka topic is pidquota's: a run that reads it makes it when missing

    def refuses(self, kind: str, shown: str) -> str | None:
        """Why an input of ``kind`` (``file``, ``kafka``), shown as ``shown``, is not one this
        format comes from, with the flag to give; None when it is."""
        if kind in self.inputs:
            return None
        where = {"kafka": "of Kafka topics", "file": "of files"}
        flag = {
            "kafka": "--input kafka://HOST[:PORT]/TOPIC[,TOPIC...] (a * matches topics)",
            "file": "--input PATH",
        }
        return (
            f"--input-format {self.name} reads the {self.noun} "
            f"{' or '.join(where[i] for i in self.inputs)}, not {shown}; give {flag[self.inputs[0]]}"
        )


DEFAULT = "events"
# The order is the sniffer's: the first format whose ``recognise`` claims a line has it, so a
# format that recognises loosely (csv: any line of 3 to 5 fields with integers second and
# third) comes after the ones it could take lines from; and the plug-in's records, JSON objects
# with a principal, before the events, which claim any such object.
FORMATS: tuple[Entry, ...] = (
    Entry(
        "plugin-inits",
        "plugin_inits",
        "plug-in init records",
        "what pidquota's broker plug-in publishes: one record per InitProducerId a broker answered; no request log",
        clients=("client_id", "transactional_id", "client_address", "client_software", "broker"),
        own_topic=True,
    ),
    Entry(
        "events",
        "events",
        "JSON events",
        "pidquota's JSON events, one per line",
        clients=("client_id", "transactional_id", "broker"),
    ),
    Entry(
        "kafka-request-log",
        "request_log",
        "Kafka request-log lines",
        "brokers' request-log lines with kafka.request.logger at DEBUG, raw or in a log shipper's JSON",
        follow=True,
        clients=("client_id", "transactional_id", "client_address", "client_software", "broker"),
    ),
    Entry(
        "record-batches",
        "record_batches",
        "record batches",
        "the log audit: the record batch headers of data topics, no broker change; Kafka inputs only",
        inputs=("kafka",),
    ),
    Entry(
        "csv",
        "csv_sightings",
        "CSV sightings",
        "sightings another tool exported, one per line: principal,producer_id,timestamp[,producer_epoch[,client_id]]",
        clients=("client_id",),
    ),
)


def names() -> tuple[str, ...]:
    """Every format's name, in the registry's order."""
    return tuple(e.name for e in FORMATS)


def entry(name: str) -> Entry:
    """The registry's line for ``name``, or a :class:`ConfigError` naming the choices."""
    for e in FORMATS:
        if e.name == name:
            return e
    raise ConfigError(
        f"--input-format {name!r} is not a format pidquota reads; give one of {', '.join(names())}"
    )


def described() -> str:
    """The formats as the settings' docs and ``--help`` list them: ``name`` (help); ..."""
    return "; ".join(f"`{e.name}` ({e.help})" for e in FORMATS)
