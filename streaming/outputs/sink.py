"""The ``foreachBatch`` sink: JSON-lines files per output kind, one file per batch,
and optionally the same rows to Kafka topics.

A batch's file is written under a temporary name and renamed into place, and
its name is the batch id, so a batch that Spark replays after a crash
overwrites its own earlier output instead of duplicating it. Kafka delivery
is exactly once by default, in one transaction per batch (see
``streaming/outputs/kafka.py``).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pidquota.conf.errors import PidquotaError
from pidquota.formats.recognise import FormatGuard
from pidquota.store.kafka import CLIENT_ID
from pidquota.store.sink import RedisPublisher
from pidquota.streaming.columns import (
    ACTION_COLUMNS,
    ACTIONS,
    ANONYMOUS,
    KIND_DEAD,
    KIND_METRIC,
    OUTPUTS,
    SEEN_ADDRESSES,
)
from pidquota.streaming.outputs import retention
from pidquota.streaming.outputs.jsonl import jsonl_bytes
from pidquota.streaming.outputs.kafka import KafkaOutput
from pidquota.streaming.outputs.rows import output_rows

log = logging.getLogger("pidquota.output")

NULLABLE = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype(), pa.string(): pd.StringDtype()}


@dataclass
class BatchTotals:
    """Running counts over the batches this sink has written (this process); ``batches``
    counts those with rows."""

    batches: int = 0
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTPUTS, 0))
    skipped: Counter = field(default_factory=Counter)  # input lines of no interest, per kind
    anonymous: int = 0  # decisions for User:ANONYMOUS: a listener that authenticates no one
    dead_by_file: Counter = field(default_factory=Counter)  # dead letters per input file (file inputs)

    def add(self, parts: dict[str, pa.Table]) -> None:
        for name, part in parts.items():
            self.rows[name] += part.num_rows
        rows = parts["skipped"]
        for key, n in zip(rows["what"].to_pylist(), rows["count"].to_pylist(), strict=True):
            self.skipped[str(key)] += int(n)
        dead = parts["dead-letters"]
        if dead.num_rows:
            for source in dead["source"].to_pylist():
                if source and "@" not in source:  # a file, not a Kafka topic/partition@offset
                    self.dead_by_file[source] += 1
        decisions = parts["decisions"]
        if decisions.num_rows:
            anonymous = pc.equal(decisions["principal"], ANONYMOUS)
            if "client_id" in decisions.column_names:  # not pidquota's own clients (the journal's)
                own = pc.fill_null(pc.equal(decisions["client_id"], CLIENT_ID), False)
                anonymous = pc.and_(anonymous, pc.invert(own))
            self.anonymous += pc.sum(anonymous).as_py() or 0


def write_jsonl(rows: pa.Table, path: Path) -> None:
    """``rows`` as JSON lines at ``path`` (``streaming/outputs/jsonl.py``), under a temporary
    name renamed into place; a write that fails (a full disk) leaves nothing behind, and raises
    :class:`DiskFull` if the disk is full."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            for chunk in jsonl_bytes(rows):
                f.write(chunk)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFull(path.parent) from None
        raise


class DiskFull(PidquotaError, OSError):
    """The disk under an output or checkpoint folder is full; the message names the folder and
    how to go on, e.g. ``the disk is full under out/decisions (0 bytes free): nothing more can
    be written there. Free some space ..., then run the same command again``."""

    def __init__(self, where: Path | str):
        import shutil

        try:
            free = f"{shutil.disk_usage(where).free:,} bytes free"
        except OSError:
            free = "free space unknown"
        super().__init__(
            f"the disk is full under {where} ({free}): nothing more can be written there. Free some "
            "space (or set pidquota.output.retention.ms), then run the same command again: it "
            "resumes from its checkpoint, and loses nothing"
        )


def _parts(table: pa.Table, batch_id: int) -> dict[str, pa.Table]:
    """The batch's rows per output, with their columns and the batch id."""
    parts = {}
    for name, (kind, columns) in OUTPUTS.items():
        rows = table.select(list(columns)).filter(pc.equal(table["kind"], kind))  # copies its columns only
        parts[name] = rows.append_column(
            "batch_id", pa.repeat(pa.scalar(batch_id, pa.int64()), rows.num_rows)
        )
    return parts


class BatchFrames(Mapping):
    """A batch's rows per output name as pandas frames (what ``on_batch`` and the publisher
    get), each made from its Arrow rows when first read: a run whose observers read only the
    metrics does not pay for a million decision rows in pandas. ``actions``: the actuator's
    rows of the batch (empty without an actuator)."""

    def __init__(self, parts: dict[str, pa.Table], actions: pd.DataFrame | None = None):
        self._parts, self._frames = parts, {}
        self._frames[ACTIONS] = actions if actions is not None else pd.DataFrame(columns=ACTION_COLUMNS)

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._frames:
            self._frames[name] = self._parts[name].to_pandas(types_mapper=NULLABLE.get)
        return self._frames[name]

    def table(self, name: str) -> pa.Table:
        """The output's Arrow rows themselves (what an observer that counts reads instead)."""
        return self._parts[name]

    def __iter__(self):
        return iter([*self._parts, ACTIONS])

    def __len__(self) -> int:
        return len(self._parts) + 1


def query_id_of(batch_df) -> str:
    """The id of the streaming query whose ``foreachBatch`` got ``batch_df`` (Spark's
    ``StreamingQuery.id``, kept by the checkpoint across restarts)."""
    query_id = batch_df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
    if not query_id:
        raise PidquotaError("no streaming query id on this batch; the sink must run in foreachBatch")
    return query_id


class JsonlSink:
    """Writes each micro-batch to ``DIR/{decisions,metrics,dead-letters}/``.

    ``on_batch(batch_id, frames)`` is called after the files are in place,
    with the batch's rows per output name (the demo table uses it).

    Decision and metrics rows get ``mode`` (the run's ``pidquota.mode``) and
    ``replay``: true when the row's event time is before ``replay_until``
    (``--replay-until``). Replayed rows are written to the files only: Redis
    and the Kafka topics never see them.

    ``act`` (``pidquota.actuate.runner.BatchActuator``): after Redis, each batch's metrics
    rows that are not replayed go to the actuator, and its rows are appended to
    ``DIR/actions/run-START.jsonl``: they are things done on the cluster, in wall-clock
    time, so a replayed batch adds what it did rather than replacing a file.
    """

    def __init__(
        self,
        out_dir: str | Path,
        on_batch: Callable[[int, Mapping[str, pd.DataFrame]], None] | None = None,
        kafka: dict | None = None,
        publish: RedisPublisher | None = None,
        replay_until: int | None = None,
        mode: str = "enforce",
        roll_ms: int = 0,
        retention_ms: int = 0,
        clock: Callable[[], float] = time.time,
        act=None,
        guard: FormatGuard | None = None,
    ):
        self.out_dir = Path(out_dir)
        self.act = act
        self.guard = guard  # the run's first records in the wrong format stop it (formats/recognise.py)
        self.actions_file: Path | None = None
        if act is not None:
            (self.out_dir / ACTIONS).mkdir(parents=True, exist_ok=True)
            self.actions_file = self.out_dir / ACTIONS / f"run-{int(clock() * 1000)}.jsonl"
        self.publish = publish  # e.g. fenced per-user throttle state to Redis
        self.kafka = KafkaOutput(kafka) if kafka else None  # the Kafka output topics, or None
        self.replay_until = replay_until
        self.mode = mode
        self.roll_ms, self.retention_ms, self.clock = roll_ms, retention_ms, clock
        self._kept_at: float | None = None
        for name in OUTPUTS:
            (self.out_dir / name).mkdir(parents=True, exist_ok=True)
        self.on_batch = on_batch
        self.totals = BatchTotals()

    def __call__(self, batch_df, batch_id: int) -> None:
        if self.act is None:
            return self._write(batch_df, batch_id)
        self.act.batch_begins()  # a batch that hangs stops the plug-in's heartbeat (runner.py)
        try:
            return self._write(batch_df, batch_id)
        finally:
            self.act.batch_ends()

    def _write(self, batch_df, batch_id: int) -> None:
        # one collect, of a row per principal; Arrow keeps int64 ints with nulls intact
        raw = batch_df.toArrow()
        by_address = self.act is not None and getattr(self.act, "by_address", False)
        unlimited = _unlimited_addresses(raw, self.replay_until) if by_address else []
        table = self._marked(output_rows(raw))
        parts = _parts(table, batch_id)
        if self.guard is not None and self.guard.watching:  # before anything of the batch is out
            _guard(self.guard, parts)
        failed = 0
        if self.publish is not None:
            if not self.publish.bound:
                self.publish.bind(query_id_of(batch_df))
            # Before the files, so that the metrics rows can say how many publishes failed.
            # A replayed batch publishes again; the publisher's fencing makes that harmless.
            # (the metrics only: the publisher reads nothing else)
            self.publish(batch_id, {"metrics": _enforced(BatchFrames(parts)["metrics"])})
            failed = self.publish.failed_publishes
        actions = None
        if self.act is not None:
            metrics_rows = _enforced(BatchFrames(parts)["metrics"])
            candidates = _maybe_throttled(metrics_rows, set(self.act.acted))
            addresses = _addresses(parts["decisions"]) + unlimited if by_address else []
            clients = _clients(parts["decisions"]) if getattr(self.act, "by_client", False) else []
            rows = self.act(candidates.to_dict("records"), addresses, clients)
            actions = self.record_actions(rows, batch_id)
        metrics = parts["metrics"]
        at = metrics.schema.get_field_index("failed_publishes")
        parts["metrics"] = metrics.set_column(
            at, "failed_publishes", pa.repeat(pa.scalar(failed, pa.int64()), metrics.num_rows)
        )
        frames = BatchFrames(parts, actions)  # what on_batch reads: the metrics with failed_publishes
        table = _set(table, "failed_publishes", pc.equal(table["kind"], KIND_METRIC), pa.scalar(failed))
        for name, part in parts.items():
            target = self.out_dir / name / retention.part_name(batch_id)
            if part.num_rows:
                write_jsonl(part, target)
            elif target.exists():  # a replay that now writes nothing
                target.unlink()
        self.totals.add(parts)
        self._keep(batch_id)
        if self.kafka is not None:
            self._send(batch_df, table.filter(pc.invert(pc.fill_null(table["replay"], False))), batch_id)
        if table.num_rows:  # not the batches Spark runs without data, to move the watermark on
            self.totals.batches += 1
        if self.on_batch is not None:
            self.on_batch(batch_id, frames)

    def record_actions(self, rows: list, batch_id: int | None = None) -> pd.DataFrame:
        """The actuator's ``rows`` appended to the run's actions file (and returned as a frame).
        A file that cannot be written is a warning: what was done on the cluster is done, and
        its journal knows it."""
        records = [{**asdict(r), "batch_id": batch_id} for r in rows]
        if records and self.actions_file is not None:
            lines = "".join(json.dumps(r) + "\n" for r in records)
            try:
                with open(self.actions_file, "a", encoding="utf-8") as f:
                    f.write(lines)
            except OSError as exc:
                log.warning("actions not written to %s: %s", self.actions_file, exc)
        return pd.DataFrame(records, columns=ACTION_COLUMNS)

    def _keep(self, batch_id: int, every_s: float = 60.0) -> None:
        """Roll and expire the output files (``streaming/outputs/retention.py``), at most once a minute."""
        now = self.clock()
        if self._kept_at is not None and now - self._kept_at < every_s:
            return
        self._kept_at = now
        for name in OUTPUTS:
            folder = self.out_dir / name
            try:
                retention.roll(folder, batch_id, self.roll_ms, now)
                retention.expire(folder, self.retention_ms, now)
            except OSError as exc:  # a full disk, or another run's files: enforcement goes on
                log.warning("pidquota: output files not rolled or expired (tried again in a minute): %s", exc)

    def _marked(self, table: pa.Table) -> pa.Table:
        """``mode`` and ``replay`` on the decision and metrics rows."""
        judged = pc.invert(pc.equal(table["kind"], KIND_DEAD))
        table = _set(table, "mode", judged, pa.scalar(self.mode))
        before = pc.less(table["timestamp"], pa.scalar(self.replay_until or 0, pa.int64()))
        return _set(table, "replay", judged, pc.fill_null(before, False))

    def _send(self, batch_df, table: pa.Table, batch_id: int) -> None:
        """The batch's rows to the Kafka topics, from the driver: the batch is already collected,
        so the stateful operator does not run a second time for a second action."""
        if not self.kafka.bound:
            self.kafka.bind(query_id_of(batch_df))
        if not table.num_rows:
            return
        with_id = table.append_column("batch_id", pa.repeat(pa.scalar(batch_id, pa.int64()), table.num_rows))
        sent = self.kafka.send(with_id, batch_id)
        log.info("batch %d sent to Kafka: %s", batch_id, sent)

    def close(self) -> None:
        """Close the Kafka producer, if any (the end of a run)."""
        if self.kafka is not None:
            self.kafka.close()


def _guard(guard: FormatGuard, parts: dict[str, pa.Table]) -> None:
    """Feed the batch's records to the format guard (it raises on the wrong format)."""
    dead, skipped = parts["dead-letters"], parts["skipped"]
    counts = dict(zip(skipped["what"].to_pylist(), skipped["count"].to_pylist(), strict=True))
    events = pc.sum(parts["metrics"]["events"]).as_py() or 0
    records = events + dead.num_rows + sum(int(n or 0) for n in counts.values())
    raws = dead["raw"].to_pylist()[: guard.WATCH] if dead.num_rows else []
    guard.add(raws, records, counts, events)


def _addresses(decisions: pa.Table) -> list[tuple[str, str, bool]]:
    """The batch's live decisions that name a client address, as distinct ``(principal,
    address, throttled)`` (the actuator's :class:`pidquota.actuate.addresses.AddressBook`)."""
    if not decisions.num_rows or decisions["client_address"].null_count == decisions.num_rows:
        return []
    live = pc.invert(pc.fill_null(decisions["replay"], False))
    named = decisions.filter(pc.and_(live, pc.is_valid(decisions["client_address"])))
    named = named.append_column("throttled", pc.equal(named["verdict"], "THROTTLE"))
    seen = named.group_by(["principal", "client_address", "throttled"], use_threads=False).aggregate([])
    return list(
        zip(*(seen[c].to_pylist() for c in ("principal", "client_address", "throttled")), strict=True)
    )


def _unlimited_addresses(
    operator_rows: pa.Table, replay_until: int | None = None
) -> list[tuple[str, str, bool]]:
    """The batch's principals without a quota, with each client address they used
    (``columns.SEEN_ADDRESSES``), as the address book takes them: ``(principal, address,
    False)``; not a row that only replays (before ``replay_until``), as for the decisions. The
    limited principals' addresses come from their decisions."""
    if SEEN_ADDRESSES not in operator_rows.column_names:
        return []
    named = operator_rows.filter(pc.is_valid(operator_rows[SEEN_ADDRESSES]))
    if replay_until is not None:
        named = named.filter(pc.greater_equal(named["timestamp"], replay_until))
    return [
        (principal, address, False)
        for principal, seen in zip(
            named["principal"].to_pylist(), named[SEEN_ADDRESSES].to_pylist(), strict=True
        )
        for address in seen
    ]


def _set(table: pa.Table, column: str, where, value) -> pa.Table:
    """``table`` with ``column`` = ``value`` where ``where`` holds, null elsewhere."""
    field = table.schema.field(column)
    if isinstance(value, pa.Scalar):
        value = value.cast(field.type)
    filled = pc.if_else(where, value, pa.scalar(None, field.type))
    return table.set_column(table.schema.get_field_index(column), column, filled)


def _enforced(metrics: pd.DataFrame) -> pd.DataFrame:
    """The metrics rows that are not replayed (what may be published)."""
    if not len(metrics):
        return metrics
    return metrics[~metrics["replay"].fillna(False).astype(bool)]


def _maybe_throttled(metrics: pd.DataFrame, acted: set[str] = frozenset()) -> pd.DataFrame:
    """The rows the actuator must look at, picked per batch in pandas rather than row by row:
    new PIDs throttled in the batch, or under one token left (only then can the bucket make the
    next new PID wait), and the rows of the principals ``acted`` on (the closed loop counts their
    new PIDs). A batch of 100,000 users that throttles two hands the actuator two rows."""
    if not len(metrics):
        return metrics
    throttled = pd.to_numeric(metrics["throttled"], errors="coerce").fillna(0) > 0
    short = pd.to_numeric(metrics["tokens"], errors="coerce").fillna(float("inf")) < 1
    return metrics[throttled | short | metrics["principal"].isin(acted)]


def _clients(decisions: pa.Table) -> list[tuple[str, str, int]]:
    """The batch's live THROTTLE decisions counted by ``(principal, client id)`` (the closed
    loop's flooding client ids), where the input names the client."""
    if not decisions.num_rows or decisions["client_id"].null_count == decisions.num_rows:
        return []
    live = pc.invert(pc.fill_null(decisions["replay"], False))
    throttled = pc.and_(live, pc.equal(decisions["verdict"], "THROTTLE"))
    named = decisions.filter(pc.and_(pc.fill_null(throttled, False), pc.is_valid(decisions["client_id"])))
    counted = named.group_by(["principal", "client_id"], use_threads=False).aggregate([([], "count_all")])
    return list(zip(*(counted[c].to_pylist() for c in ("principal", "client_id", "count_all")), strict=True))
