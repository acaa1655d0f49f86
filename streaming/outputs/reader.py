"""Reading a run's output folder back: ``OUT/{decisions,metrics,dead-letters,actions}/``.

The one place that knows how the sink names its files (``streaming/outputs/sink.py``),
for the report, the tests and the benchmarks. Spark-free.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pidquota.streaming.columns import ACTIONS, OUTPUTS


def output_files(out: str | Path, name: str) -> list[Path]:
    """The files of one output (``decisions``, ``metrics`` or ``dead-letters``), oldest batch first:
    per-batch parts and hourly rolls (``streaming/outputs/retention.py``)."""
    if name == ACTIONS:  # one file per run start, appended to (streaming/outputs/sink.py)
        return sorted(Path(out, name).glob("run-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    if name not in OUTPUTS:
        raise ValueError(f"unknown output {name!r}; one of {', '.join([*OUTPUTS, ACTIONS])}")
    from pidquota.streaming.outputs.retention import output_files as files

    return files(Path(out, name))


def read_output(out: str | Path, name: str) -> pd.DataFrame:
    """One output's rows, in batch order (an empty frame when there are none). A running job
    may roll parts into one file while they are read: the listing is then taken again."""
    for attempt in range(3):
        try:
            frames = [_read_jsonl(f) for f in output_files(out, name)]
            break
        except FileNotFoundError:
            if attempt == 2:
                raise
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _read_jsonl(path: Path) -> pd.DataFrame:
    with path.open("rb") as f:  # opened here: pandas takes a missing path for JSON text
        return pd.read_json(f, lines=True, dtype=False, convert_dates=False)
