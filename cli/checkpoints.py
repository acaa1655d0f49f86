"""What a checkpoint records about its run, read and checked before Spark starts (pure Python).

* :func:`check_checkpoint`: a checkpoint written by another source (the demo's
  checkpoint read with a file input...) is refused with the fix, instead of
  failing inside Spark with 70 lines of ``No usable value for logOffset``.
* :func:`check_state_layout`: the grouping, the state layout and the state store
  the checkpoint was written with.
* :func:`check_output_batches`: an output folder holding another checkpoint's batches.
* :func:`write_marker`: records the source in ``CHECKPOINT/pidquota-source.json``
  as ``{"kind": "demo"|"file"|"kafka", "input": ...}`` (``input``: ``"demo"``,
  the file's absolute path, or ``kafka://HOST:PORT/TOPIC`` without credentials).

A checkpoint written before the marker existed is recognised by its newest
``offsets/`` file: Spark's file source writes ``{"logOffset": N}``, pidquota's
``{"files": N}``, the demo ``{"origin": ms, "t": ms}`` and the Kafka source
``{"TOPIC": {"PARTITION": offset}}``. A checkpoint that is not a local path
(``s3a://``, ``hdfs://``) is not checked.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from pidquota.conf.errors import ConfigError, PidquotaError
from pidquota.conf.paths import is_inside, local_path
from pidquota.store.kafka import with_port

MARKER = "pidquota-source.json"


CHECKPOINT_EVIDENCE = ("metadata", "offsets", MARKER)


@dataclass(frozen=True)
class Source:
    """What a query reads. ``input``: ``demo``, an absolute path, ``kafka://HOST:PORT/TOPIC``,
    or None when only the kind (and Kafka topics) could be told from an old checkpoint."""

    kind: str
    input: str | None
    topics: tuple[str, ...] = ()
    shown: str = field(default="", compare=False)  # as the user wrote it, for messages

    @classmethod
    def of(cls, given: str | None) -> Source:
        """The source of ``--input`` (None: the demo)."""
        if given is None:
            return cls("demo", "demo", shown="demo")
        if given.startswith("kafka://"):
            rest = given[len("kafka://") :]
            hosts, _, topic = rest.rpartition("@")[2].partition("/")
            return cls("kafka", f"kafka://{hosts}/{topic}", (topic,), shown=given)
        return cls("file", str(Path(given).resolve()), shown=given)

    def describe(self) -> str:
        if self.kind == "demo":
            return "the demo source"
        if self.kind == "spark-file":
            return (
                "Spark's file source (an earlier pidquota; its offsets cannot be resumed by the current one)"
            )
        if self.kind == "file":
            return f"file input {self.shown or self.input!r}" if self.input else "a file input"
        if self.input:
            return f"Kafka input {_without_credentials(self.shown or self.input)!r}"
        return f"Kafka topic {', '.join(map(repr, self.topics))}"

    def bootstrap(self) -> set[str]:
        """The brokers, each with its port (a marker may have none: Kafka's 9092 then)."""
        hosts = (self.input or "kafka:///").removeprefix("kafka://").partition("/")[0]
        return {with_port(h.strip().lower()) for h in hosts.split(",") if h.strip()}


def _without_credentials(url: str) -> str:
    head, at, tail = url.rpartition("@")
    return f"kafka://{tail}" if at else url


def check_checkpoint(checkpoint: str, source: Source, output: Path) -> None:
    """Refuse a checkpoint that has progress from another source, naming the fix."""
    ckpt = local_path(checkpoint)
    if ckpt is None or not ckpt.is_dir() or not has_progress(ckpt):
        return
    recorded = recorded_source(ckpt)
    hint = None if recorded is None else _mismatch(recorded, source)
    if hint is None:
        return
    if is_inside(ckpt, output):
        fix = f"use another --output (or --checkpoint), or --fresh to delete {output} and start over"
    else:
        fix = f"use another --checkpoint, or --fresh to delete it (and {output}) and start over"
    raise ConfigError(
        f"the checkpoint {checkpoint} belongs to {recorded.describe()}, not {source.describe()}; {fix}{hint}"
    )


def _mismatch(recorded: Source, current: Source) -> str | None:
    """None when ``current`` may resume ``recorded``'s checkpoint; else a hint (maybe empty)."""
    if recorded.kind != current.kind:
        return ""
    if recorded.kind != "kafka":
        return None  # another file path is fine: Spark tracks files by path
    if set(recorded.topics) != set(current.topics):
        return ""
    if recorded.input and not recorded.bootstrap() & current.bootstrap():
        return f" (if it is the same cluster under new addresses, edit {MARKER} in the checkpoint)"
    return None


def check_output_batches(checkpoint: str, output: Path) -> None:
    """Refuse output files of batches the checkpoint has not planned: another checkpoint wrote
    them, and this one's batch ids, starting again at 0, would mix with (or, once rolled, hide
    behind) them. Not checked for a checkpoint that is not a local folder."""
    from pidquota.streaming.columns import OUTPUTS
    from pidquota.streaming.outputs.retention import batches_of, output_files

    ckpt = local_path(checkpoint)
    if ckpt is None:
        return
    planned = last_planned(ckpt)
    for name in OUTPUTS:
        ahead = [f for f in output_files(output / name) if batches_of(f)[1] > planned]
        if ahead:
            has = "no batch yet" if planned < 0 else f"batches up to {planned}"
            raise ConfigError(
                f"{output / name} holds {ahead[-1].name}, but the checkpoint {checkpoint} has {has}: "
                f"those files were written under another checkpoint; use another --output, or --fresh "
                f"to delete {output} (and the checkpoint) and start over"
            )


def last_planned(ckpt: Path) -> int:
    """The newest batch Spark has planned (``offsets/N``), or -1."""
    try:
        return max((int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdigit()), default=-1)
    except OSError:
        return -1


def has_progress(ckpt: Path) -> bool:
    """True when Spark has planned a batch: ``offsets/`` holds a batch file (unreadable: False,
    and Spark will say why)."""
    return last_planned(ckpt) >= 0


def last_batch(checkpoint: str) -> int | None:
    """The last batch the checkpoint committed (Spark's ``commits/N``), or None: none, or
    not a local folder."""
    from pidquota.conf.paths import local_path

    where = local_path(checkpoint)
    try:
        done = [int(p.name) for p in (where / "commits").iterdir() if p.name.isdigit()] if where else []
    except OSError:
        return None
    return max(done, default=None)


def recorded_source(ckpt: Path) -> Source | None:
    """The checkpoint's source from its marker or, for an older checkpoint, its newest offsets."""
    return read_marker(ckpt) or sniff_offsets(ckpt)


def recorded_replay(checkpoint: str) -> int | None:
    """The replay time the checkpoint's marker records (``--replay-until``), or None."""
    ckpt = local_path(checkpoint)
    try:
        value = json.loads((ckpt / MARKER).read_text(encoding="utf-8")).get("replay_until_ms")
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_marker(ckpt: Path) -> Source | None:
    try:
        data = json.loads((ckpt / MARKER).read_text(encoding="utf-8"))
        kind, given = data["kind"], data["input"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if kind not in ("demo", "file", "kafka") or not isinstance(given, str):
        return None
    return Source.of(None) if kind == "demo" else Source.of(given) if kind == "kafka" else Source(kind, given)


def sniff_offsets(ckpt: Path) -> Source | None:
    """The kind of source that wrote the newest ``offsets/N`` file (its last line), or None."""
    offsets = ckpt / "offsets"
    try:
        batches = [int(p.name) for p in offsets.iterdir() if p.name.isdigit()] if offsets.is_dir() else []
        if not batches:
            return None
        lines = (offsets / str(max(batches))).read_text(encoding="utf-8").split("\n")
        offset = json.loads(next(x for x in reversed(lines) if x.strip()))
    except (OSError, ValueError, StopIteration):
        return None
    if not isinstance(offset, dict) or not offset:
        return None
    if "logOffset" in offset:  # Spark's own file source, which pidquota used before its own
        return Source("spark-file", None)
    if set(offset) == {"files"}:
        return Source("file", None)
    if set(offset) == {"origin", "t"}:
        return Source("demo", "demo")
    if all(isinstance(v, dict) for v in offset.values()):
        return Source("kafka", None, tuple(sorted(offset)))
    return None


def _offsets(ckpt: Path, batch: int) -> dict | None:
    """The source offset that ``offsets/BATCH`` ends at (its last line), or None."""
    try:
        lines = (ckpt / "offsets" / str(batch)).read_text(encoding="utf-8").split("\n")
        offset = json.loads(next(x for x in reversed(lines) if x.strip()))
    except (OSError, ValueError, StopIteration):
        return None
    return offset if isinstance(offset, dict) else None


def failed_input(ckpt: Path) -> str | None:
    """What the batch that failed read, from the checkpoint: the newest ``offsets/N`` with no
    ``commits/N``, against ``offsets/N-1``. For files, the files of the ledger between the two
    (``{"files": K}`` is a position in it); for Kafka, each partition's offsets. None when no
    batch is pending or its source says nothing more (the demo, followed files).

    Worked example: offsets/2 ``{"files": 5}``, offsets/1 ``{"files": 3}``, no commits/2:
    ``batch 2, which read in/c.jsonl, in/d.jsonl``."""
    from pidquota.sources import listing

    try:
        planned = [int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdigit()]
    except OSError:
        return None
    if not planned or (ckpt / "commits" / str(max(planned))).exists():
        return None
    batch = max(planned)
    end, start = _offsets(ckpt, batch), _offsets(ckpt, batch - 1) or {}
    if end is None:
        return None
    if set(end) == {"files"} and isinstance(end["files"], int):
        try:
            files = listing.read_ledger(ckpt / listing.LEDGER)[int(start.get("files", 0)) : end["files"]]
        except PidquotaError:
            return None
        shown = ", ".join(f.path.removeprefix("file:") for f in files[:5]) + (
            f" and {len(files) - 5} more" if len(files) > 5 else ""
        )
        return f"batch {batch}, which read {shown}" if files else None
    if end and all(isinstance(v, dict) for v in end.values()):
        spans = [
            f"{topic} partition {part} offsets {(start.get(topic) or {}).get(part, 0)}..{int(last) - 1}"
            for topic, parts in sorted(end.items())
            for part, last in sorted(parts.items())
            if isinstance(last, int) and last > (start.get(topic) or {}).get(part, 0)
        ]
        return f"batch {batch}, which read {'; '.join(spans)}" if spans else None
    return None


def check_reading(checkpoint: str, input_format: str, follow: bool) -> None:
    """Refuse a checkpoint whose input was read in another format, or followed where it is
    not now (or the other way round): its offsets would be misread, or its lines misjudged.
    Another format is taken when no batch was ever committed (a run that stopped at its
    first batch, such as one the format guard stopped, wrote nothing under the old format).
    A checkpoint from before the marker recorded it is not checked (the followed reader
    still refuses the other reader's offsets)."""
    ckpt = local_path(checkpoint)
    if ckpt is None or not ckpt.is_dir() or not has_progress(ckpt):
        return
    try:
        marker = json.loads((ckpt / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        marker = {}
    if not isinstance(marker, dict) or "input_format" not in marker:
        return  # from before the marker recorded it: the run records it now (write_marker)
    was = (marker["input_format"], bool(marker.get("follow", False)))
    if was == (input_format, follow):
        return
    if was[1] == follow and last_batch(str(ckpt)) is None:
        return  # no batch was ever written (a run stopped at its first, e.g. in the wrong format)

    def flags(fmt: str, followed: bool) -> str:
        return f"--input-format {fmt}" + (" --follow" if followed else " --no-follow")

    raise ConfigError(
        f"the checkpoint {checkpoint} reads its input with {flags(*was)}, not {flags(input_format, follow)}; "
        f"run with {flags(*was)} again, or start over with --fresh (or another --output)"
    )


def check_state_layout(
    checkpoint: str, buckets: int, store: str, store_given: bool, layout: str = "groups"
) -> str:
    """Refuse a checkpoint whose state was grouped (``pidquota.state.buckets``) or laid out
    (``pidquota.state.layout``) otherwise: its principals' state would be looked for in the
    wrong groups, or not be pidquota's layout.

    Returns the state store to run with (``pidquota.state.store``). A checkpoint keeps its
    store: Spark would go on with it and silently ignore the setting. So the checkpoint's
    store is used when the setting was left at its default (a checkpoint from before the
    setting was kept by ``hdfs``), and refused when it was given otherwise."""
    ckpt = local_path(checkpoint)
    if ckpt is None or not ckpt.is_dir() or not (ckpt / "state").is_dir():
        return store
    try:
        marker = json.loads((ckpt / MARKER).read_text(encoding="utf-8"))
        recorded = marker.get("state_buckets")
        recorded_store = marker.get("state_store", "hdfs")  # before the setting: Spark's default
        recorded_layout = marker.get("state_layout", "groups")  # before the setting: groups
    except (OSError, ValueError, AttributeError):
        recorded, recorded_store, recorded_layout = None, store, layout
    if recorded is None:
        raise ConfigError(
            f"the checkpoint {checkpoint} holds state from an older pidquota (one state row per principal, "
            "before pidquota.state.buckets), which this version cannot read; start with a new checkpoint "
            "(--fresh, or another --checkpoint)"
        )
    if recorded != buckets:
        raise ConfigError(
            f"the checkpoint {checkpoint} keeps its state in pidquota.state.buckets={recorded} groups, not "
            f"{buckets}; set pidquota.state.buckets={recorded} again, or start with a new checkpoint (--fresh)"
        )
    if recorded_layout != layout:
        raise ConfigError(
            f"the checkpoint {checkpoint} keeps its state in pidquota.state.layout={recorded_layout}, not "
            f"{layout}; set pidquota.state.layout={recorded_layout} again, or start with a new checkpoint "
            "(--fresh)"
        )
    if recorded_store != store and store_given:
        raise ConfigError(
            f"the checkpoint {checkpoint} keeps its state in pidquota.state.store={recorded_store}, not "
            f"{store}; set pidquota.state.store={recorded_store} again, or start with a new checkpoint (--fresh)"
        )
    return recorded_store


def write_marker(
    checkpoint: str,
    source: Source,
    buckets: int | None = None,
    store: str | None = None,
    replay_until: int | None = None,
    reading: tuple[str, bool] | None = None,
    layout: str | None = None,
) -> None:
    """Record the source, the state's grouping, its store, the replay time and how the input
    is read (``reading``: its format, and whether files are followed) in
    ``CHECKPOINT/pidquota-source.json`` (a remote checkpoint: skipped)."""
    ckpt = local_path(checkpoint)
    if ckpt is None:
        return
    marker = ckpt / MARKER
    tmp = ckpt / f".{MARKER}.tmp"
    try:
        ckpt.mkdir(parents=True, exist_ok=True)
        marker_json = {"kind": source.kind, "input": source.input}
        if buckets is not None:
            marker_json["state_buckets"] = buckets
        if store is not None:
            marker_json["state_store"] = store
        if layout is not None:
            marker_json["state_layout"] = layout
        if replay_until is not None:
            marker_json["replay_until_ms"] = replay_until
        if reading is not None:
            marker_json["input_format"], marker_json["follow"] = reading
        tmp.write_text(json.dumps(marker_json) + "\n", encoding="utf-8")
        os.replace(tmp, marker)
    except OSError as exc:
        raise PidquotaError(f"cannot write {marker}: {exc.strerror or exc}") from None
