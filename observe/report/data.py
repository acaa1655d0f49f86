"""The numbers of ``pidquota report`` and of the per-user run summary: the run, its offenders
table and header. pandas and Arrow only: no Spark, no matplotlib, no HTML.

A run's output folder is read through :func:`pidquota.streaming.outputs.reader.read_output` alone. Rows
marked ``replay`` (events before ``--replay-until``, which only rebuilt state and were never
published) are counted in the header and left out of everything else, as the Prometheus
exporter leaves them out of its counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pidquota.conf.errors import InputError
from pidquota.observe.distinct import DistinctCount
from pidquota.quota import ADMIT, THROTTLE
from pidquota.quota.client import COLUMNS as CLIENT_COLUMNS
from pidquota.quota.client import Client
from pidquota.streaming.outputs.reader import read_output

OTHER_CLIENTS = Client(client_id="(more clients)")  # a user's clients past Offenders.MAX_CLIENTS


@dataclass(frozen=True)
class Run:
    """One run's output folder: its three outputs, replayed rows included."""

    folder: Path
    decisions: pd.DataFrame
    metrics: pd.DataFrame
    dead: pd.DataFrame
    actions: pd.DataFrame = field(default_factory=pd.DataFrame)  # the actuator's, if it ran


def load_run(out: str | Path) -> Run:
    """The outputs under ``out``; an :class:`InputError` naming the folder if there are none."""
    folder = Path(out)
    if not folder.is_dir():
        raise InputError(f"output folder '{out}' does not exist; give the --output folder of a pidquota run")
    run = Run(
        folder,
        read_output(folder, "decisions"),
        read_output(folder, "metrics"),
        read_output(folder, "dead-letters"),
        read_output(folder, "actions"),
    )
    if run.decisions.empty and run.metrics.empty and run.dead.empty:
        raise InputError(
            f"'{out}' holds no pidquota output (no rows under decisions/, metrics/ or dead-letters/); "
            "give the --output folder of a run that read something"
        )
    return run


def replayed(frame: pd.DataFrame | None) -> pd.Series:
    """Which rows only rebuilt state (``replay`` true); all False without the column."""
    if frame is None or "replay" not in frame:
        return pd.Series(False, index=None if frame is None else frame.index, dtype=bool)
    return frame["replay"].astype("boolean").fillna(False).astype(bool)


def live(frame: pd.DataFrame | None) -> pd.DataFrame:
    """The rows that were judged live: all but the replayed ones."""
    if frame is None:
        return pd.DataFrame()
    return frame[~replayed(frame)]


def utc(ms) -> pd.Timestamp | pd.Series:
    """Event time in ms since the epoch as UTC datetimes (tz-naive, for plotting)."""
    if isinstance(ms, pd.Series):
        return pd.to_datetime(ms.astype("int64"), unit="ms")
    return pd.Timestamp(int(ms), unit="ms")


def format_ms(ms: float | None) -> str:
    """A duration for people: ``850 ms``, ``1 s``, ``12.3 s``, ``4 min 10 s``, ``2 h 5 min``, ``-`` for none."""
    if ms is None or pd.isna(ms):
        return "-"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}".removesuffix(".0") + " s"
    s = int(round(ms / 1000))
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    m = int(round(s / 60))
    return f"{m // 60} h {m % 60} min" if m % 60 else f"{m // 60} h"


def format_time(ms: float | None) -> str:
    """An event time as ``2026-01-01 00:03:36 UTC``, ``-`` for none."""
    if ms is None or pd.isna(ms):
        return "-"
    return utc(ms).strftime("%Y-%m-%d %H:%M:%S UTC")


class Offenders:
    """Per-user tallies of the decisions, fed all at once (the report) or batch by batch
    (:class:`RunSummary`); :meth:`table` is the offenders table both show.

    Per user: ``new_pids`` = distinct ``producer_id`` among its ADMIT and THROTTLE rows,
    ``throttles`` = its THROTTLE rows, ``longest_throttle_ms`` = their largest
    ``throttle_time_ms``, ``first_throttle_ms`` / ``last_throttle_ms`` = their smallest and
    largest event time. A retried PID counts once in ``new_pids`` and once per THROTTLE in
    ``throttles``: one user's rows (PID 7, ADMIT, t = 5), (PID 8, THROTTLE 4000 ms, t = 10),
    (PID 8, THROTTLE 3000 ms, t = 11) give new_pids 2, throttles 2, longest 4000 ms, first
    10, last 11. Users seen only in metrics (no new PIDs, e.g. only PID < 0) are listed with 0.
    ``new_pids`` is exact up to 50,000 per user, then a HyperLogLog estimate within ~1%
    (``observe/distinct.py``), so memory stays bounded however long the run.

    ``client`` names the application, where the input gives the decisions a client
    (``pidquota.quota.client``): the client with the most THROTTLE rows (else the most
    decisions), and how many others the user had. At most ``MAX_CLIENTS`` clients are
    told apart per user; the rest are counted as one.
    """

    COLUMNS = (
        "user",
        "new_pids",
        "throttles",
        "longest_throttle_ms",
        "first_throttle_ms",
        "last_throttle_ms",
        "client",
    )
    MAX_CLIENTS = 1000

    def __init__(self) -> None:
        self.users: set[str] = set()
        self._pids: dict[str, DistinctCount] = {}
        self._throttles: dict[str, list] = {}  # user -> [count, longest, first, last]
        self._clients: dict[str, dict[Client, list[int]]] = {}  # user -> client -> [throttles, decisions]

    def add(self, decisions, metrics=None) -> Offenders:
        """Tally ``decisions`` (the live ones) and note the users of both; each a pandas frame or
        an Arrow table (the sink's batch, which then never becomes pandas: a million flood
        decisions cost ~1.8 s in pandas, ~0.2 s here). Only the columns counted are read."""
        for frame in (decisions, metrics):
            principals = _principals(frame)
            if principals is not None:
                self.users.update(pc.unique(principals.drop_null()).to_pylist())
        judged = _judged(decisions)
        if judged is None:
            return self
        # the principals encoded once, then grouped by their integer codes (a million rows of
        # a flood batch: grouping by the strings twice cost ~0.3 s)
        encoded = pc.dictionary_encode(judged["principal"]).combine_chunks()
        codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        codes[~pc.is_valid(judged["producer_id"]).to_numpy(zero_copy_only=False)] = -1  # no PID: none counted
        names = encoded.dictionary.to_pylist()
        named = codes >= 0
        order = np.argsort(codes, kind="stable")[np.count_nonzero(~named) :]  # without a principal: none
        pids = judged["producer_id"].fill_null(0).to_numpy().astype(np.int64, copy=False)[order]
        bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
        for k, user in enumerate(names):
            self._pids.setdefault(user, DistinctCount()).add(pids[bounds[k] : bounds[k + 1]])
        self._add_clients(judged)
        self._add_throttles(judged)
        return self

    def _add_throttles(self, judged: pa.Table) -> None:
        """Each user's THROTTLE rows: how many, the longest wait, the first and last times."""
        refused = judged.filter(
            pc.and_(pc.equal(judged["verdict"], THROTTLE), pc.is_valid(judged["principal"]))
        )
        if not refused.num_rows:
            return
        per_user = refused.group_by("principal", use_threads=False).aggregate(
            [([], "count_all"), ("throttle_time_ms", "max"), ("timestamp", "min"), ("timestamp", "max")]
        )
        columns = ("principal", "count_all", "throttle_time_ms_max", "timestamp_min", "timestamp_max")
        for user, n, longest, first, last in zip(*(per_user[c].to_pylist() for c in columns), strict=True):
            old = self._throttles.get(user)
            new = [int(n), int(longest), int(first), int(last)]
            if old is not None:
                new = [old[0] + new[0], max(old[1], new[1]), min(old[2], new[2]), max(old[3], new[3])]
            self._throttles[user] = new

    def _add_clients(self, judged: pa.Table) -> None:
        """Tally each user's decisions per client (one group-by, not a Python call per row), in
        the order the clients first come."""
        present = [c for c in CLIENT_COLUMNS if c in judged.column_names]
        if not present or all(judged[c].null_count == judged.num_rows for c in present):
            return
        keys = ["principal", "verdict", *present]
        counted = judged.select(keys).group_by(keys, use_threads=False).aggregate([([], "count_all")])
        for user, verdict, *fields, n in zip(
            *(counted[c].to_pylist() for c in [*keys, "count_all"]), strict=True
        ):
            client = Client.from_row(dict(zip(present, fields, strict=True)))
            if client is None:
                continue
            per = self._clients.setdefault(user, {})
            if client not in per and len(per) >= self.MAX_CLIENTS:
                client = OTHER_CLIENTS
            tally = per.setdefault(client, [0, 0])
            tally[0] += int(n) if verdict == THROTTLE else 0
            tally[1] += int(n)

    def client_text(self, user: str) -> str:
        """The user's main client and how many other applications (``""``: the input named
        none). One application seen through several brokers counts once: ``client.id app
        via 6 brokers``."""
        per = self._clients.get(user)
        if not per:
            return ""
        apps: dict[Client, list[int]] = {}
        brokers: dict[Client, set] = {}
        for client, (throttles, decisions) in per.items():
            app = replace(client, broker=None)
            tally = apps.setdefault(app, [0, 0])
            tally[0] += throttles
            tally[1] += decisions
            brokers.setdefault(app, set()).add(client.broker)
        named = {a: t for a, t in apps.items() if a != OTHER_CLIENTS} or apps
        main = max(named, key=lambda a: (named[a][0], named[a][1], a.joined() or ""))
        seen = {b for b in brokers[main] if b}
        text = main.text() + (
            f" via {len(seen)} brokers"
            if len(seen) > 1
            else f" via broker {next(iter(seen))}"
            if seen
            else ""
        )
        more = len(apps) - 1
        return text + (f", +{more} other client{'s' if more > 1 else ''}" if more else "")

    def table(self) -> pd.DataFrame:
        """One row per user: the most throttled first, then by new PIDs, then by name."""
        rows = []
        for user in self.users:
            count, longest, first, last = self._throttles.get(user, (0, None, None, None))
            rows.append(
                (user, len(self._pids.get(user, ())), count, longest, first, last, self.client_text(user))
            )
        table = pd.DataFrame(rows, columns=list(self.COLUMNS))
        for col in self.COLUMNS[3:6]:
            table[col] = table[col].astype("Int64")
        table = table.sort_values(["throttles", "new_pids", "user"], ascending=[False, False, True])
        return table.reset_index(drop=True)


_COUNTED = ("principal", "producer_id", "verdict", "throttle_time_ms", "timestamp", *CLIENT_COLUMNS)


def _arrow(frame, columns) -> pa.Table | None:
    """``columns`` of ``frame`` (those it has) as an Arrow table; None for no rows or no frame."""
    if frame is None or not len(frame):
        return None
    if isinstance(frame, pd.DataFrame):
        kept = [c for c in columns if c in frame.columns]
        return pa.Table.from_pandas(frame[kept], preserve_index=False)
    return frame.select([c for c in columns if c in frame.column_names])


def _principals(frame) -> pa.ChunkedArray | None:
    table = _arrow(frame, ("principal",))
    return table["principal"] if table is not None and table.num_columns else None


def _judged(decisions) -> pa.Table | None:
    """The ADMIT and THROTTLE rows, with the columns :class:`Offenders` counts (None: none)."""
    table = _arrow(decisions, _COUNTED)
    if table is None or "verdict" not in table.column_names or pa.types.is_null(table["verdict"].type):
        return None  # no rows, or none with a verdict
    judged = table.filter(pc.fill_null(pc.is_in(table["verdict"], pa.array([ADMIT, THROTTLE])), False))
    return judged if judged.num_rows else None


def live_table(table: pa.Table | None) -> pa.Table | None:
    """:func:`live` for an Arrow table: all but the rows marked ``replay``."""
    if table is None or "replay" not in table.column_names or pa.types.is_null(table["replay"].type):
        return table  # no column, or no row says: none replayed
    replay = pc.fill_null(table["replay"].cast(pa.bool_()), False)
    return table.filter(pc.invert(replay))


def offenders(decisions: pd.DataFrame, metrics: pd.DataFrame | None = None) -> pd.DataFrame:
    """The offenders table (:meth:`Offenders.table`) of the live rows of a whole run."""
    return Offenders().add(live(decisions), live(metrics)).table()


def others_line(table: pd.DataFrame, shown: int) -> str | None:
    """The one line for the users not in the first ``shown`` rows of an offenders table:
    ``6 other users, none throttled``, or with the throttled ones among them counted."""
    rest = table.iloc[shown:]
    if rest.empty:
        return None
    throttled = int((rest["throttles"] > 0).sum())
    users = "user" if len(rest) == 1 else "users"
    other = "other " if shown else ""
    if not throttled:
        return f"{len(rest)} {other}{users}, none throttled"
    return f"{len(rest)} {other}{users}, {throttled} of them throttled ({int(rest['throttles'].sum())} throttles)"


class RunSummary:
    """The per-user summary of a run, fed by the sink batch by batch, for the end of a
    ``pidquota run --once``.

    Use::

        summary = RunSummary()
        sink = JsonlSink(out, on_batch=lambda batch_id, frames: summary.add(frames))
        ...  # the query runs to its end
        print(summary.render())

    ``frames`` is what :class:`pidquota.streaming.outputs.sink.JsonlSink` passes to ``on_batch``:
    ``{"decisions": df, "metrics": df, "dead-letters": df}``. The numbers are
    :class:`Offenders`' (the report's offenders table), over the live rows. Memory, per
    user with new PIDs: a set of up to 50,000 PIDs, then a 16 KiB sketch; and four numbers per
    throttled user.
    """

    def __init__(self, top: int = 10) -> None:
        self.top = top
        self.offenders = Offenders()

    def add(self, frames) -> None:
        tables = getattr(frames, "table", None)  # the sink's batch: its Arrow rows, never pandas
        if tables is not None:
            self.offenders.add(live_table(tables("decisions")), live_table(tables("metrics")))
        else:
            self.offenders.add(live(frames.get("decisions")), live(frames.get("metrics")))

    def render(self) -> str:
        """A short plain-text table of the throttled users (at most ``top``), then one line
        for everyone else."""
        table = self.offenders.table()
        if table.empty:
            return "no users"
        throttled = table[table["throttles"] > 0].head(self.top)
        lines = []
        if len(throttled):
            width = max(20, *(len(u) for u in throttled["user"]))
            lines.append(
                f"{'throttled user':<{width}} {'new PIDs':>9} {'throttles':>10} {'longest':>12}"
                + ("  client" if throttled["client"].any() else "")
            )
            for r in throttled.itertuples():
                lines.append(
                    f"{r.user:<{width}} {r.new_pids:>9,} {r.throttles:>10,} {format_ms(r.longest_throttle_ms):>12}"
                    + (f"  {r.client}" if r.client else "")
                )
        rest = others_line(table, len(throttled))
        return "\n".join([*lines, *([rest] if rest else [])])


def window_ms(decisions: pd.DataFrame) -> int | None:
    """The run's window W in ms, read back from its THROTTLE rows; None if they do not say.

    The bucket's wait (``quota/bucket.py``) is ``throttle_time_ms = ceil((1 - t) * W / R)``
    with R the row's ``quota`` and t its ``tokens``, so ``W ~ throttle_time_ms * R / (1 - t)``.
    Example: R = 60, t = 0.25, 45000 ms give W = 45000 * 60 / 0.75 = 3,600,000 ms (1 h).
    The median estimate (from rows with t <= 0.5, where the ceiling's error is smallest),
    rounded to whole seconds as the setting is, is W if it gives back 99% of the waits
    within 2 ms; otherwise (no throttles, or W changed mid-run) None.
    """
    if decisions.empty or "verdict" not in decisions:
        return None
    t = decisions[(decisions["verdict"] == THROTTLE) & (decisions["quota"] > 0)]
    if t.empty:
        return None
    wait, rate, tokens = (t[c].astype("float64") for c in ("throttle_time_ms", "quota", "tokens"))
    low = tokens <= 0.5
    estimate = (wait * rate / (1 - tokens))[low if low.any() else slice(None)].median()
    w = round(estimate / 1000) * 1000
    if not w >= 1000:
        return None
    again = np.ceil((1 - tokens) * w / rate)
    return int(w) if ((again - wait).abs() <= 2).mean() >= 0.99 else None


def _column(frames, name: str) -> pd.Series:
    """One column of several frames, end to end (empty if none has it)."""
    parts = [f[name] for f in frames if name in f and len(f)]
    return pd.concat(parts, ignore_index=True) if parts else pd.Series(dtype="float64")


@dataclass(frozen=True)
class Header:
    """The report's first lines: where, when, how much."""

    folder: Path
    start_ms: int | None
    end_ms: int | None
    batches: int
    decisions: int
    metric_rows: int
    events: int
    dead_letters: int
    replayed_decisions: int
    window_ms: int | None
    modes: tuple[str, ...]


def header(run: Run) -> Header:
    times = _column((run.decisions, run.metrics), "timestamp")
    batches = _column((run.decisions, run.metrics, run.dead), "batch_id")
    modes = sorted({m for f in (run.decisions, run.metrics) if "mode" in f for m in f["mode"].dropna()})
    return Header(
        folder=run.folder.resolve(),
        start_ms=None if times.empty else int(times.min()),
        end_ms=None if times.empty else int(times.max()),
        batches=int(batches.nunique()),
        decisions=len(run.decisions),
        metric_rows=len(run.metrics),
        events=int(run.metrics["events"].sum()) if "events" in run.metrics else 0,
        dead_letters=len(run.dead),
        replayed_decisions=int(replayed(run.decisions).sum()),
        window_ms=window_ms(run.decisions),
        modes=tuple(modes),
    )
