"""The live per-user table, refreshed from each batch's metrics: redrawn in place on a
terminal, printed as plain lines when the output is piped."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

import pandas as pd

from pidquota.quota.client import Client
from pidquota.quota.user_state import UserState

MAX_USER_WIDTH = 60
# Why rate/W can pass quota/W, and what tokens mean (quota/bucket.py: at most B + Q * t
# new PIDs get in over any t, so up to 2 x quota over one window).
LEGEND = (
    "rate/W: new PIDs admitted in the last window W. Up to 2 x quota/W can get in: the burst "
    "(quota) plus the refill over W (quota/W per W), the bucket's B + Q*t. tokens < 1: a new PID waits. "
    "admitted: new PIDs, each once; throttles: THROTTLE decisions (a refused PID seen again counts again)."
)
# Piped, the tables follow one another: the legend with the first and then every this many (as
# vmstat repeats its header), not under each. On a terminal each table replaces the last: always.
LEGEND_EVERY = 20
_CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen


def _acted(mark: str | None) -> str:
    return f", {mark}" if mark else ""


def _client(client: Client | None) -> str:
    return f"  {client.text()}" if client is not None else ""


def _num(x, fmt="{:.1f}") -> str:
    return "-" if x is None or pd.isna(x) else fmt.format(x)


def tokens_text(tokens) -> str:
    """Tokens rounded down to 2 decimals, so 0.996 (throttled) never shows as 1.00."""
    if tokens is None or pd.isna(tokens):
        return "-"
    return f"{math.floor(float(tokens) * 100) / 100:.2f}"


def _short(user: str, width: int) -> str:
    return user if len(user) <= width else user[: width - 1] + "\u2026"


class UserTable:
    """Keeps the latest metrics row per user and shows them after each batch.

    On a terminal (``tty``; by default whether ``out`` goes to one) the table is
    redrawn in place, at most every ``every_s`` seconds but always with the
    latest batch. Piped, it prints one table per batch; batches that come
    faster than ``every_s`` are gathered into the next table, whose header
    names the batches it covers ("batches 12-15"). Nothing is skipped silently.
    The legend (:data:`LEGEND`) closes every redraw on a terminal; piped, the first
    table and then every :data:`LEGEND_EVERY`-th: with 20, tables 0, 20, 40 and so on.

    The STATE column is what ``pidquota status`` answers for the user, in the
    user's event time (:class:`pidquota.quota.user_state.UserState`): ``THROTTLED 36s`` while
    a new PID would wait, else ``ok``; then ``ACTED ON`` while the actuator holds one of
    Kafka's controls on the user (``WOULD ACT`` in a dry run), from the batch's ``actions``
    rows. After it, the user's main client where the input names one (its latest batch's:
    ``client.id app-1 (kafka-python 3.0.12) at 10.0.0.5 via broker b1``). Throttled users
    come first; with ``max_rows``, the rest are counted in one line.
    """

    def __init__(
        self,
        window_ms: int,
        every_s: float = 0.5,
        out: Callable[[str], None] = print,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        shadow: bool = False,
        max_rows: int | None = None,
    ):
        self.window_ms = window_ms
        self.latest: dict[str, dict] = {}
        self.every_s = every_s
        self.out = out
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.clock = clock
        self.shadow = shadow
        self.max_rows = max_rows  # at most this many users, throttled first (None: all)
        self._shown_at: float | None = None
        self._first_unshown: int | None = None  # the oldest batch not shown yet
        self._last_batch = 0
        self._tables = 0  # tables shown so far
        self.acted: dict[str, str] = {}  # principal -> ACTED ON or WOULD ACT
        self.clients: dict[str, Client] = {}  # principal -> its latest main client, where known

    def held(self, principals) -> None:
        """Mark ``principals`` ACTED ON: what the actuator holds from before this run (a restart
        keeps them, and no ``apply`` row of this run says so)."""
        self.acted.update(dict.fromkeys(principals, "ACTED ON"))

    def update(self, batch_id: int, frames: dict) -> None:
        for row in frames["metrics"].to_dict("records"):
            self.latest[row["principal"]] = row
            client = Client.from_row(row)
            if client is not None:
                self.clients[row["principal"]] = client
        actions = frames.get("actions")
        for row in [] if actions is None else actions.to_dict("records"):
            if row["action"] == "apply":
                self.acted[row["principal"]] = "WOULD ACT" if row.get("dry_run") else "ACTED ON"
            elif row["action"] in ("undo", "left"):
                self.acted.pop(row["principal"], None)
        if self._first_unshown is None:
            self._first_unshown = batch_id
        self._last_batch = batch_id
        if self._shown_at is None or self.clock() - self._shown_at >= self.every_s:
            self.flush()

    def flush(self) -> None:
        """Show the batches not shown yet (the end of a run calls this: none is left out)."""
        if self.latest and self._first_unshown is not None:
            self._shown_at = self.clock()
            legend = self.tty or self._tables % LEGEND_EVERY == 0
            table = self.render(self._last_batch, self._first_unshown, legend)
            self._first_unshown = None
            self._tables += 1
            self.out(_CLEAR + table if self.tty else "\n" + table)

    def _state(self, row: dict) -> tuple[bool, str]:
        state = UserState.from_metrics(row, int(row.get("batch_id") or 0), self.window_ms)
        if state is None or not state.throttled:
            return False, "ok"
        return True, f"THROTTLED {math.ceil(state.wait_ms / 1000)}s"

    def render(self, batch_id: int, first: int | None = None, legend: bool = True) -> str:
        states = {u: self._state(r) for u, r in self.latest.items()}
        rows = sorted(self.latest.values(), key=lambda r: (not states[r["principal"]][0], r["principal"]))
        newest = max((r["timestamp"] for r in rows), default=0)
        when = pd.Timestamp(newest, unit="ms").strftime("%Y-%m-%d %H:%M:%S") if rows else "-"
        which = f"batch {batch_id}" if first in (None, batch_id) else f"batches {first}-{batch_id}"
        mode = ", SHADOW: computed, not published" if self.shadow else ""
        width = min(MAX_USER_WIDTH, max([4, *(len(u) for u in self.latest)]))
        header = (
            f"{'user':<{width}} {'quota/W':>8} {'rate/W':>8} {'tokens':>8} {'admitted':>9} "
            f"{'throttles':>9} {'state':>9}  STATE"
        )
        lines = [f"-- {which}, event time {when} UTC{mode} --", header]
        for r in rows:
            size = r.get("state_bytes")
            lines.append(
                f"{_short(r['principal'], width):<{width}} {_num(r.get('quota'), '{:.0f}'):>8} "
                f"{_num(r.get('rate')):>8} {tokens_text(r.get('tokens')):>8} "
                f"{_num(r.get('admitted_total'), '{:.0f}'):>9} {_num(r.get('throttled_total'), '{:.0f}'):>9} "
                f"{('-' if size is None or pd.isna(size) else f'{int(size):,} B'):>9}  "
                f"{states[r['principal']][1]}{_acted(self.acted.get(r['principal']))}"
                f"{_client(self.clients.get(r['principal']))}"
            )
        rest = rows[self.max_rows :] if self.max_rows is not None else []
        if rest:
            throttled = sum(states[r["principal"]][0] for r in rest)
            lines[2 + self.max_rows :] = [
                f"... and {len(rest):,} more users ({throttled:,} of them throttled)"
            ]
        if legend:
            lines.append(LEGEND)
        return "\n".join(lines)
