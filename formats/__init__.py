"""Input formats: what pidquota's inputs mean, one module per format behind one protocol.

A *transport* (files, followed files, Kafka topics, the demo: ``pidquota.sources``)
brings batches of records and knows no format. A *format* knows no transport: it says what
its records are and turns a batch of them into *sightings*, ``(principal, producer_id,
timestamp, producer_epoch, client)``, which the house folds per principal and judges with
the quota. Each format is one module of this package and one line of the registry,
``pidquota.conf.formats`` (its name, words and inputs). Its module's ``FORMAT`` gives:

``entry``
    its registry line (:class:`pidquota.conf.formats.Entry`).
``reads``
    what a transport hands it: ``"lines"`` (each record's bytes as ``value``, with the
    transport's position columns) or ``"batch-headers"`` (a Kafka record batch's header
    fields; no record is decoded).
``recognise(text) -> bool``
    whether one line (decoded, stripped) is one of its records. The sniffer asks every
    format about a file's first lines before the file is read, and about a running query's
    first dead letters, so a wrong ``--input-format`` is one line, not a folder of dead
    letters; the first format of the registry that claims a line has it, so a loose
    ``recognise`` belongs late in the registry. Pure and cheap: no Spark, no state.
``options(config) -> dict[str, str]``
    the source options its screen needs, from the settings: strings, which travel to the
    executors with the source. At least ``{"inputFormat": name}``. It may read what the
    settings name (the audit's topic owners, from a file or Redis): ``pidquota run`` calls it
    once at start-up, so a broken one is one line before Spark starts.
``screen(line_schema, max_principal, options, broker_of) -> Screen``
    what judges a batch where the transport reads it (an executor's Python, in Arrow):
    ``screen.screen(batch)`` yields batches of ``screen.schema``
    (``folded.screened_schema``): each principal's sightings folded into one row
    (``folded.fold``), the rows it judged itself (dead letters with their reason, counts of
    lines skipped per kind: ``folded.judged_batch``), and the lines it leaves to its strict
    parse (``check`` true). It never raises on a bad record: every line is accounted for.
    ``broker_of(source)`` names the broker of a line's file, if the input says.
``said(config) -> str``
    what the run's banner says after the format's name, starting with a space (the audit's
    topic owners: `` (owners: orders -> User:alice; ...)``), or "".
``strict``
    where the lines left unchecked are judged: the name of a function in a module of this
    package, ``(lines, max_principal, keep)`` over a Spark DataFrame, giving events and dead
    letters tagged ``KIND_EVENT``/``KIND_DEAD`` in the columns ``kind``, ``principal``,
    ``producer_id``, ``producer_epoch``, ``timestamp``, ``client``, ``raw``, ``reason``,
    ``source``, then ``keep`` (the events' exact VARIANT parse,
    ``"events_spark.parse_events"``), or None when the screen judges every line itself. A
    name, not the function: it imports Spark, and the CLI reads the formats before Spark
    starts. :func:`strict_of` finds it.
``foreign``
    the skipped kind under which its screen counts lines that are none of its records
    (``not-a-request`` for the request log), or None when such lines are dead letters. The
    format guard counts them as the wrong format, the run's last lines warn when they are all
    it read, and the Prometheus exporter shows their count at 0 from the start.

The house does the rest: it lists, follows and reads the input, sniffs files before they
are read (``recognise.check_files``), folds, shuffles, keeps state and writes.

Worked example: the request log. ``recognise('[2026-11-24 13:00:00,123] DEBUG Completed
request:{...}')`` is True; ``options(config)`` is ``{"inputFormat": "kafka-request-log",
"requestLogTimezone": "UTC", ...}``; its screen turns a batch of 100 lines (95 FETCH, 3
METADATA, one granted and one refused INIT_PRODUCER_ID) into one folded row
``("User:alice", [4000], ...)`` and one row of counts ``{"skipped": {"FETCH": 95,
"INIT_PRODUCER_ID refused": 1, "METADATA": 3}}``; ``strict`` is None. A new format, say a CSV
of ``principal,producer_id,timestamp``, is one module like ``request_log.py`` with its
``FORMAT`` and one line in ``pidquota.conf.formats``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from pidquota.conf import formats as registry
from pidquota.conf.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa


class Screen(Protocol):
    """A format's judge of one transport's batches (see the module docstring)."""

    schema: pa.Schema

    def screen(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]: ...


class Format(Protocol):
    """One input format (see the module docstring)."""

    entry: registry.Entry
    reads: str
    strict: str | None
    foreign: str | None

    def recognise(self, text: str) -> bool: ...

    def options(self, config) -> dict[str, str]: ...

    def said(self, config) -> str: ...

    def screen(
        self,
        line_schema: pa.Schema,
        max_principal: int,
        options: Mapping[str, str],
        broker_of: Callable[[str], str | None] | None = None,
    ) -> Screen: ...


OPTION = "inputFormat"  # the source option that names the format


def get(name: str) -> Format:
    """The format called ``name`` (a :class:`ConfigError` naming the choices if none is)."""
    return importlib.import_module(f"{__name__}.{registry.entry(name).module}").FORMAT


def every() -> list[Format]:
    """Every format, in the registry's order."""
    return [get(name) for name in registry.names()]


def strict_of(fmt: Format) -> Callable | None:
    """The format's strict parse, a Spark function (see ``strict``), or None."""
    if fmt.strict is None:
        return None
    module, _, name = fmt.strict.rpartition(".")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def of_options(options: Mapping[str, str]) -> Format:
    """The format a source's options name (Spark lower-cases their keys), the default if none."""
    return get(options.get(OPTION) or options.get(OPTION.lower()) or registry.DEFAULT)


def screened(
    batches: Iterator[pa.RecordBatch], line_schema: pa.Schema, options, broker_of=None
) -> Iterator[pa.RecordBatch]:
    """A transport's batches through its format's screen when the options ask for one
    (``folded.OPTION``: the principal length limit), else as they are."""
    import pyarrow as pa

    from pidquota.formats.folded import screen_limit

    limit, fmt = screen_limit(options), of_options(options)
    if not limit:
        if fmt.reads != "lines":
            raise ConfigError(
                f"--input-format {fmt.entry.name} is read by its screen alone: give the source screen="
            )
        yield from batches
        return
    screen = fmt.screen(line_schema, limit, options, broker_of)
    for batch in batches:
        if batch.num_rows:
            i = batch.schema.get_field_index("value")  # -1: no lines (batch headers)
            if i >= 0 and not pa.types.is_binary(batch.schema.field(i).type):
                batch = batch.set_column(i, "value", batch.column(i).cast(pa.binary()))
            yield from screen.screen(batch)
