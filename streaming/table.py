"""The demo's per-user table, refreshed from each batch's metrics."""

from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd

from store.state import UserState

_HEADER = (
    f"{'user':<20} {'quota/W':>8} {'rate/W':>8} {'tokens':>8} {'admitted':>9} {'throttled':>9} {'state':>9}"
    f"  {'now':<16}"
)


def _num(x, fmt="{:.1f}") -> str:
    return "-" if x is None or pd.isna(x) else fmt.format(x)


class UserTable:
    """Keeps the latest metrics row per user; prints at most every ``every_s``.

    The ``now`` column is what ``pidquota status`` answers for the user, in the
    user's event time, computed the same way (:class:`store.state.UserState`):
    ``THROTTLED 36.0s`` while a new PID would wait, else ``ok``.
    """

    def __init__(self, window_ms: int, every_s: float = 3.0, out: Callable[[str], None] = print):
        self.window_ms = window_ms
        self.latest: dict[str, dict] = {}
        self.every_s = every_s
        self.out = out
        self._printed = 0.0

    def update(self, batch_id: int, frames: dict) -> None:
        for row in frames["metrics"].to_dict("records"):
            self.latest[row["principal"]] = row
        if self.latest and time.monotonic() - self._printed >= self.every_s:
            self._printed = time.monotonic()
            self.out(self.render(batch_id))

    def _now(self, row: dict) -> str:
        state = UserState.from_metrics(row, int(row.get("batch_id") or 0), self.window_ms)
        if state is None or not state.throttled:
            return "ok"
        return f"THROTTLED {state.wait_ms / 1000:.1f}s"

    def render(self, batch_id: int) -> str:
        rows = sorted(self.latest.values(), key=lambda r: (-(r.get("throttled_total") or 0), r["principal"]))
        newest = max((r["timestamp"] for r in rows), default=0)
        when = pd.Timestamp(newest, unit="ms").strftime("%Y-%m-%d %H:%M:%S") if rows else "-"
        lines = [f"\n-- batch {batch_id}, event time {when} UTC --", _HEADER]
        for r in rows:
            state = r.get("state_bytes")
            lines.append(
                f"{r['principal'][:20]:<20} {_num(r.get('quota'), '{:.0f}'):>8} {_num(r.get('rate')):>8} "
                f"{_num(r.get('tokens')):>8} {_num(r.get('admitted_total'), '{:.0f}'):>9} "
                f"{_num(r.get('throttled_total'), '{:.0f}'):>9} "
                f"{('-' if state is None or pd.isna(state) else f'{int(state):,} B'):>9}"
                f"  {self._now(r):<16}"
            )
        return "\n".join(lines)
