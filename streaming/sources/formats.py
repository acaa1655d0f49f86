"""Which screen a source runs over its lines: the JSON event's (``streaming/screen.py``) or
the broker request log's (``streaming/request_log.py``), chosen by the source's options."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from pidquota.streaming.request_log import Options, RequestLogScreen
from pidquota.streaming.screen import Screen, as_binary, screen_limit


def make_screen(options, line_schema: pa.Schema, broker_of: Callable[[str], str | None] | None = None):
    """The screen the source's options ask for, or None: the source yields its lines."""
    limit = screen_limit(options)
    if not limit:
        return None
    request_log = Options.from_source(options)
    if request_log is not None:
        return RequestLogScreen(line_schema, limit, request_log, broker_of)
    return Screen(as_binary(line_schema), limit)


def screened_lines(batches: Iterator[pa.RecordBatch], line_schema: pa.Schema, options, broker_of=None):
    """A source's line batches through its screen (``value`` made binary first), or as they are."""
    screen = make_screen(options, line_schema, broker_of)
    if screen is None:
        yield from batches
        return
    i = line_schema.get_field_index("value")
    for batch in batches:
        if batch.num_rows:
            if not pa.types.is_binary(batch.schema.field(i).type):
                batch = batch.set_column(i, "value", batch.column(i).cast(pa.binary()))
            yield from screen.screen(batch)
