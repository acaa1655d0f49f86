"""The stateful operator: ``applyInPandasWithState`` glue around ``quota``.

Each group is the events of this micro-batch of a fixed group of
principals (``pidquota.state.buckets``; ``quota/states.py`` holds their
states in one row), or the dead letters, passed straight through. All quota
logic lives in :class:`pidquota.quota.PrincipalQuota`; this module only moves
columns and state. Its per-principal steps (:func:`judge_principal`,
:func:`on_timeout`, :func:`unfold`, :func:`dead_letters`) also serve the layout with
one state entry per principal (``streaming/principals.py``), through the same
interface as :class:`~pidquota.quota.states.PrincipalStates`.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import astuple

import numpy as np
import pandas as pd

from pidquota.quota import Decisions, PrincipalQuota, QuotaSettings, QuotaSource, client, kernel, resolve
from pidquota.quota.group import ELSEWHERE, judge_group
from pidquota.quota.group import wanted as group_pass_wanted
from pidquota.quota.states import PrincipalStates
from pidquota.streaming.columns import (
    CLIENT_COLUMNS,
    DEAD_PRINCIPAL,
    DECISION_ARRAYS,
    KIND_DEAD,
    KIND_METRIC,
    KIND_SKIPPED,
    PACKED,
)
from pidquota.streaming.schema import OPERATOR_COLUMNS

# PySpark's worker pads each group's output with all-NA rows and concatenates
# (pyspark/worker.py), which makes pandas 2.x warn on every batch. It is not
# ours to fix and says nothing about our data; this module is imported in the
# worker, so silence exactly that warning there.
warnings.filterwarnings(
    "ignore", message="The behavior of DataFrame concatenation with empty or all-NA", category=FutureWarning
)


_INDEX = {c: i for i, c in enumerate(OPERATOR_COLUMNS)}
_WIDTH = len(OPERATOR_COLUMNS)


def _row(**values) -> list:
    """One operator row in ``OPERATOR_COLUMNS`` order, the missing columns null."""
    row = [None] * _WIDTH
    for name, value in values.items():
        row[_INDEX[name]] = value
    return row


def frame(rows: list[list]) -> pd.DataFrame:
    """Rows to one frame. An object array, its columns left as objects (PySpark's Arrow
    conversion types them by the schema), costs ~60 us where pandas' inference of each
    column's type costs ~0.5 ms and a frame built column by column ~0.8 ms; this runs
    once per group per batch."""
    block = np.empty((len(rows), _WIDTH), dtype=object)
    block[:] = rows
    return pd.DataFrame(block, columns=list(OPERATOR_COLUMNS), dtype=object, copy=False)


def dead_letters(pdfs: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Dead letters as they are, and the counts of skipped lines summed per kind."""
    skipped: Counter = Counter()
    for pdf in pdfs:
        if len(pdf):
            letters = [json.loads(x) for x in pdf["dead"]]
            rows = []
            for d in letters:
                if "skipped" in d:
                    skipped.update(d["skipped"])
                else:
                    rows.append(
                        _row(kind=KIND_DEAD, raw=d.get("raw"), reason=d.get("reason"), source=d.get("source"))
                    )
            if rows:
                yield frame(rows)
    if skipped:
        yield frame([_row(kind=KIND_SKIPPED, what=k, count=n) for k, n in sorted(skipped.items())])


def unfold(pdf: pd.DataFrame) -> dict[str, tuple]:
    """Rows of (principal, arrays of sightings) (streaming/compact.py, formats/events.py)
    back to one entry per sighting, per principal: timestamps, producer ids, epochs, and
    its PIDs' clients (sorted PIDs and their joined identities, or None: no client named)."""
    names, ts, pids, epochs, bounds, clients = columns(pdf)
    ends = bounds.tolist()
    return {
        name: (ts[a:b], pids[a:b], epochs[a:b], clients.get(name))
        for name, a, b in zip(names, ends[:-1], ends[1:], strict=True)
    }


def columns(pdf: pd.DataFrame) -> tuple:
    """Rows of (principal, arrays of sightings) as one column per field, principal by principal:
    the principals (in the order they first come), timestamps, producer ids and epochs,
    principal ``k``'s rows ``bounds[k]:bounds[k+1]``, and the clients as :func:`unfold`'s."""
    stamps = pdf["timestamps"].to_list()  # plain lists and a dict: a group has a few rows, and
    lengths = np.fromiter(map(len, stamps), dtype=np.int64, count=len(stamps))  # pandas' own
    ts = np.concatenate(stamps).astype(np.int64, copy=False)  # calls cost more than they save
    epochs = np.concatenate(pdf["epochs"].to_list()).astype(np.int64, copy=False)
    pids = np.concatenate(pdf["producer_ids"].to_list()).astype(np.int64, copy=False)
    first: dict[str, int] = {}  # principal -> its code, in the order they first come (pd.factorize's)
    codes = np.fromiter(
        (first.setdefault(p, len(first)) for p in pdf["principal"].to_list()), dtype=np.int64, count=len(pdf)
    )
    names = list(first)
    clients = _clients(pdf, codes, names)
    if len(names) == 1:
        return names, ts, pids, epochs, np.array([0, len(ts)], dtype=np.int64), clients
    owner = np.repeat(codes, lengths)
    order = np.argsort(owner, kind="stable")
    bounds = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=len(names)), out=bounds[1:])
    return names, ts[order], pids[order], epochs[order], bounds, clients


def _clients(pdf: pd.DataFrame, codes: np.ndarray, names) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per principal, its PIDs' clients as (sorted PIDs, their identities): the least identity
    a PID has in any row (the fold's rule, so the split into partitions never changes the
    answer). One sort for the whole group, then a slice per principal."""
    if "clients" not in pdf.columns:
        return {}
    listed = pdf["clients"].to_list()
    if all(c is None for c in listed):  # no PID named a client (most inputs): ~1 us, not pandas' ~50
        return {}
    named = pdf["clients"].notna().to_numpy()
    rows = pdf[named]
    owners = codes[named]
    if len(np.unique(owners)) == len(owners):  # one row per principal (the usual case): no merge
        out = {}
        for owner, pids, clients in zip(owners.tolist(), rows["client_pids"], rows["clients"], strict=True):
            pids = np.asarray(pids, dtype=np.int64)
            order = np.argsort(pids, kind="stable")
            out[names[owner]] = (pids[order], np.asarray(clients, dtype=object)[order])
        return out
    lengths = rows["client_pids"].map(len).to_numpy(dtype=np.int64)
    table = pd.DataFrame(
        {
            "owner": np.repeat(owners, lengths),
            "pid": np.concatenate(rows["client_pids"].to_list()).astype(np.int64, copy=False),
            "client": np.concatenate(rows["clients"].to_list()),
        }
    ).sort_values(["owner", "pid", "client"], kind="stable")
    table = table[~table.duplicated(["owner", "pid"])]  # the least identity of each PID
    owners = table["owner"].to_numpy()
    pids, clients = table["pid"].to_numpy(np.int64), table["client"].to_numpy(object)
    bounds = np.searchsorted(owners, np.arange(len(names) + 1))
    return {
        names[k]: (pids[b:e], clients[b:e])
        for k, (b, e) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))
        if e > b
    }


def decision_clients(decisions: Decisions, clients: tuple[np.ndarray, np.ndarray] | None) -> list:
    """Each verdict's client identity (None where its PID named none)."""
    if clients is None or not len(decisions):
        return [None] * len(decisions)
    pids, names = clients
    at = np.minimum(np.searchsorted(pids, decisions.producer_id), len(pids) - 1)
    return np.where(pids[at] == decisions.producer_id, names[at], None).tolist()


def main_client(decisions: Decisions, clients: list) -> dict:
    """The batch's main client as the metrics row's client columns: the most frequent among
    its throttled PIDs, else among its admitted ones (``{}``: none known)."""
    throttled = [c for c, a in zip(clients, decisions.admitted.tolist(), strict=True) if not a]
    joined = client.top(throttled) or client.top(clients)
    known = client.Client.parse(joined)
    return {} if known is None else dict(zip(CLIENT_COLUMNS, astuple(known), strict=True))


def on_timeout(states: PrincipalStates, principal: str, watermark: int, settings: QuotaSettings) -> None:
    """An idle principal's timer passed: evict its state, or look again later. The
    state itself is left as it was (the cleanup done to decide is not kept)."""
    quota = PrincipalQuota.from_bytes(states.get(principal), settings)
    if quota.is_evictable(max(watermark, quota.now_ms)):
        states.remove(principal)
    else:  # late events moved it on
        states.set_timer(principal, max(quota.evict_at_ms(), watermark + 1))


MAX_SEEN_ADDRESSES = 1_000  # an unlimited principal's addresses a batch: a bound, whatever it sends


def seen_addresses(clients: tuple[np.ndarray, np.ndarray] | None) -> list[str] | None:
    """The distinct client addresses among a principal's PIDs' clients, sorted (None: none
    named), at most ``MAX_SEEN_ADDRESSES``: ``["a␟␟10.0.0.5␟␟", "b␟␟10.0.0.5␟␟1"]`` gives
    ``["10.0.0.5"]``."""
    if clients is None:
        return None
    found: set[str] = set()
    for joined in set(clients[1].tolist()):
        known = client.Client.parse(joined)
        if known is not None and known.address:
            found.add(known.address)
            if len(found) >= MAX_SEEN_ADDRESSES:
                break
    return sorted(found) or None


def _untracked_metrics(
    principal: str, rate, ts: np.ndarray, ignored: int, stale: bool, addresses: list[str] | None = None
) -> list:
    """The metrics row of a principal with no state: unlimited, or only PID < 0 so far;
    ``addresses``, its batch's (:data:`SEEN_ADDRESSES`)."""
    n = len(ts)
    return _row(
        seen_addresses=addresses,
        kind=KIND_METRIC,
        principal=principal,
        timestamp=int(ts.max()),
        quota=rate,
        events=n,
        admitted=0,
        throttled=0,
        passed=n - ignored,
        ignored=ignored,
        quota_stale=stale,
    )


def _judged(
    principal: str,
    quota: PrincipalQuota,
    decisions: Decisions,
    n: int,
    ignored: int,
    stale: bool,
    replay_until=None,
    clients: tuple[np.ndarray, np.ndarray] | None = None,
) -> list:
    """The principal's metrics row, carrying its verdicts packed (``columns.PACKED``,
    turned into decision rows by the sinks: ``streaming/outputs/rows.py``). The row's ``admitted``
    and ``throttled`` count the live decisions only: those before ``replay_until`` only
    rebuilt state (a batch may straddle that time) and count as ``passed``."""
    m = quota.metrics()
    admitted = decisions.admitted
    if replay_until is not None:
        admitted = admitted[decisions.timestamp >= replay_until]
    took = int(admitted.sum())
    throttled = len(admitted) - took
    m["throttle_time_ms"] = round(m["throttle_time_ms"])
    chosen = decision_clients(decisions, clients)
    named = {} if clients is None else main_client(decisions, chosen)  # None: no PID named a client
    return _row(
        kind=KIND_METRIC,
        principal=principal,
        timestamp=quota.now_ms,
        events=n,
        admitted=took,
        throttled=throttled,
        passed=n - ignored - took - throttled,
        ignored=ignored,
        quota_stale=stale,
        **_arrays(decisions, chosen),
        **named,
        **m,
    )


def _arrays(decisions: Decisions, clients: list) -> dict:
    """The verdicts as the metrics row's decision columns: packed (``columns.PACKED``), and the
    clients as a list, or None when no verdict names one."""
    out = {column: _packed(getattr(decisions, name), name) for name, column in _PACKED_COLUMNS}
    out[DECISION_ARRAYS["client"]] = _clients_or_none(clients)
    return out


_PACKED_COLUMNS = tuple((name, DECISION_ARRAYS[name]) for name in PACKED)


def _packed(values: np.ndarray, name: str) -> bytes:
    """One principal's verdicts of one column as its packed bytes (``columns.PACKED``)."""
    return np.ascontiguousarray(values, dtype=PACKED[name]).tobytes()


def _clients_or_none(clients: list) -> list | None:
    return clients if any(c is not None for c in clients) else None


def judge_principal(
    principal: str,
    sightings,
    states: PrincipalStates,
    watermark: int,
    rate,
    stale: bool,
    settings,
    replay_until: int | None = None,
    addresses: bool = False,
) -> list:
    """One principal's events of this batch: its metrics row, its verdicts packed; with
    ``addresses``, an untracked principal's row names its batch's client addresses."""
    ts, pids, epochs, clients = sightings
    ignored = int((pids < 0).sum())
    blob = states.get(principal)
    if rate is None or (ignored == len(ts) and blob is None):
        states.remove(principal)  # unlimited now, or nothing to track: no state, nothing to decide
        seen = seen_addresses(clients) if addresses else None
        return _untracked_metrics(principal, rate, ts, ignored, stale, seen)
    if blob is not None:
        quota = PrincipalQuota.from_bytes(blob, settings)
        quota.apply_rate(rate)
    else:
        quota = PrincipalQuota(rate, settings, int(ts.min()))
    decisions = quota.judge_batch(ts, pids, epochs, replay_until)
    states.put(principal, quota.to_bytes(), max(quota.evict_at_ms(), watermark + 1))
    return _judged(principal, quota, decisions, len(ts), ignored, stale, replay_until, clients)


def judge_together(
    pdf: pd.DataFrame,
    states: PrincipalStates,
    snapshot,
    stale: bool,
    watermark: int,
    settings: QuotaSettings,
    replay_until: int | None = None,
    addresses: bool = False,
) -> list[list]:
    """:func:`judge_principal` for every principal of a group's batch, those with a quota in
    one pass (``quota/group.py``): the same rows, in the same order, and the same states."""
    names, ts, pids, epochs, bounds, clients = columns(pdf)
    lengths = np.diff(bounds)
    negative = np.zeros(len(pids) + 1, dtype=np.int64)
    np.cumsum(pids < 0, out=negative[1:])
    ignored = (negative[bounds[1:]] - negative[bounds[:-1]]).tolist()  # per principal, 0 if none
    rates = [resolve(snapshot, name) for name in names]
    blobs = [states.get(name) for name in names]
    together = [
        k
        for k, (rate, n, blob) in enumerate(zip(rates, lengths.tolist(), blobs, strict=True))
        if rate is not None and not (ignored[k] == n and blob is None)
    ]
    rows: list = [None] * len(names)
    ends = bounds.tolist()

    def one_by_one(k: int) -> list:
        a, b, name = ends[k], ends[k + 1], names[k]
        sightings = (ts[a:b], pids[a:b], epochs[a:b], clients.get(name))
        return judge_principal(
            name, sightings, states, watermark, rates[k], stale, settings, replay_until, addresses
        )

    if together:
        chosen = np.zeros(len(names), dtype=bool)
        chosen[together] = True
        rows_of = np.repeat(chosen, lengths)
        sub = np.zeros(len(together) + 1, dtype=np.int64)
        np.cumsum(lengths[chosen], out=sub[1:])
        outcome = judge_group(
            ts[rows_of], pids[rows_of], epochs[rows_of], sub, [blobs[k] for k in together],
            [rates[k] for k in together], settings, watermark, replay_until,
        )  # fmt: skip
        verdicts = [
            np.ascontiguousarray(column, dtype=PACKED[name])
            for name, column in zip(Decisions.__slots__, outcome.verdicts, strict=True)
        ]
        for j, k in enumerate(together):
            if outcome.status[j] == ELSEWHERE:
                rows[k] = one_by_one(k)
                continue
            name = names[k]
            states.put(name, outcome.blob(j), outcome.timer(j))
            rows[k] = _judged_row(
                name, outcome, j, verdicts, int(lengths[k]), ignored[k], stale, rates[k], clients
            )
    return [row if row is not None else one_by_one(k) for k, row in enumerate(rows)]


def _judged_row(
    name: str,
    outcome,
    j: int,
    verdicts: list[np.ndarray],
    n: int,
    ignored: int,
    stale: bool,
    rate,
    clients: dict,
) -> list:
    """:func:`_judged`'s row for principal ``j`` of a group pass."""
    a, b = outcome.bounds[j], outcome.bounds[j + 1]
    took, refused = outcome.live(j)
    mine = clients.get(name)
    if mine is None:
        chosen, named = None, {}
    else:
        decisions = outcome.decisions(j)
        chosen = decision_clients(decisions, mine)
        named = main_client(decisions, chosen)
        chosen = _clients_or_none(chosen)
    row = [None] * _WIDTH  # _row's, written in place: this runs once per principal and batch
    row[_KIND], row[_PRINCIPAL], row[_TIMESTAMP], row[_EVENTS] = KIND_METRIC, name, outcome.now_ms(j), n
    row[_ADMITTED], row[_THROTTLED], row[_PASSED] = took, refused, n - ignored - took - refused
    row[_IGNORED], row[_STALE], row[_CLIENT] = ignored, stale, chosen
    for at, column in zip(_VERDICT_AT, verdicts, strict=True):
        row[at] = column[a:b].tobytes()
    for key, value in (*named.items(), *outcome.metrics(j, rate).items()):
        row[_INDEX[key]] = value
    return row


# Where _judged_row writes: the decision columns in the order of Decisions' fields
# (quota/decision.py), then the row's own columns
_VERDICT_AT = tuple(_INDEX[DECISION_ARRAYS[f]] for f in Decisions.__slots__)
_KIND, _PRINCIPAL, _TIMESTAMP, _EVENTS = (_INDEX[c] for c in ("kind", "principal", "timestamp", "events"))
_ADMITTED, _THROTTLED, _PASSED = (_INDEX[c] for c in ("admitted", "throttled", "passed"))
_IGNORED, _STALE, _CLIENT = (_INDEX[c] for c in ("ignored", "quota_stale", DECISION_ARRAYS["client"]))


def make_state_function(
    quotas: QuotaSource,
    settings: QuotaSettings,
    replay_until: int | None = None,
    addresses: bool = False,
    compiled_after: int = kernel.LOAD_AFTER,
) -> Callable[[tuple, Iterator[pd.DataFrame], object], Iterator[pd.DataFrame]]:
    """The function given to ``applyInPandasWithState``, closing over the quota
    source, the settings and the replay time (shipped to the executors once). Its
    key is a group of principals (``quota/states.py``), or the dead letters' group.
    ``compiled_after``: ``pidquota.compiled.after``, the sightings a worker judges before it
    loads the compiled judge (``kernel.wanted``)."""

    def judge(key: tuple, pdfs: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        kernel.LOAD_AFTER = compiled_after  # in the worker: the run's setting
        (key_name,) = key
        if key_name == DEAD_PRINCIPAL:
            yield from dead_letters(pdfs)
            return
        states = PrincipalStates.from_bytes(state.get[0]) if state.exists else PrincipalStates()
        watermark = state.getCurrentWatermarkMs()
        judged: list[list] = []
        touched: set[str] = set()
        if not state.hasTimedOut:
            frames = list(pdfs)
            pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
            snapshot, stale = quotas.snapshot(), bool(quotas.stale)  # stale: last known quotas in force
            if group_pass_wanted(len(pdf)):  # the group's principals in one compiled pass
                judged = judge_together(
                    pdf, states, snapshot, stale, watermark, settings, replay_until, addresses
                )
                touched.update(row[_INDEX["principal"]] for row in judged)
            else:
                for principal, sightings in unfold(pdf).items():
                    touched.add(principal)
                    rate = resolve(snapshot, principal)
                    judged.append(
                        judge_principal(
                            principal,
                            sightings,
                            states,
                            watermark,
                            rate,
                            stale,
                            settings,
                            replay_until,
                            addresses,
                        )
                    )
        for principal in states.due(watermark, touched):
            on_timeout(states, principal, watermark, settings)
        if len(states):
            state.update((states.to_bytes(),))
            state.setTimeoutTimestamp(states.next_timer_ms())
        elif state.exists:
            state.remove()
        if judged:
            yield frame(judged)

    return judge
