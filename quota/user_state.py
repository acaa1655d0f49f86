"""One user's throttle state as pidquota publishes it: in the user's event time."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import astuple, dataclass, replace

from pidquota.quota.bucket import TokenBucket
from pidquota.quota.client import COLUMNS, Client


def finite(value) -> float | None:
    """``value`` as a float, or None for None, pandas' NA, NaN and infinities."""
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def shown(value: float, digits: int | None = None) -> str:
    """A number for Redis: rounded to ``digits`` decimals, integers without ``.0``."""
    if digits is not None:
        value = round(value, digits)
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass(frozen=True)
class UserState:
    """A user's latest state, from the enforcer's metrics row, in that user's event time.

    ``now_ms`` is the user's event time: the newest event time the enforcer
    has seen from that user (the metrics row's ``timestamp``). Nothing here
    reads the wall clock, so a replayed old file and a demo at 60x give the
    same answer as the enforcer did.

    The wait is the bucket's own answer, not new math: with R = ``quota``
    per window W, the bucket's credit is ``tokens * W`` and
    ``wait = TokenBucket.try_take(now_ms)``; 0 means a new PID is admitted
    now, else ``throttled_until_ms = now_ms + wait``. Example: R = 100 per
    W = 3600 s, tokens = 0 at now = T: wait = ceil(W / R) = 36000 ms, so the
    user is THROTTLED until T + 36000 (of event time); with tokens = 0.5 the
    wait is 18000 ms; with tokens >= 1 the user is not throttled.

    A quota change (:meth:`requoted`) is ``TokenBucket.set_rate``: what was
    spent stays spent. Raised from 100 to 100000 with tokens = 0: tokens =
    99900, not throttled. Made unlimited: no quota, no throttle.
    """

    principal: str
    now_ms: int
    batch_id: int
    window_ms: int
    quota: float | None = None
    tokens: float | None = None  # exact, as the enforcer had it; rounded only when written
    rate: float | None = None
    throttle_time_ms: float | None = None
    admitted_total: float | None = None
    throttled_total: float | None = None
    client: Client | None = None  # its main client, where the input names one

    @classmethod
    def from_metrics(cls, row: Mapping, batch_id: int, window_ms: int) -> UserState | None:
        """The state in one metrics row, or None if the row has no event time."""
        now = finite(row.get("timestamp"))
        if now is None:
            return None
        quota, tokens = finite(row.get("quota")), finite(row.get("tokens"))
        if quota is None or quota <= 0:  # unlimited: nothing of a bucket applies
            quota = tokens = None
        return cls(
            principal=str(row["principal"]),
            now_ms=int(now),
            batch_id=int(batch_id),
            window_ms=int(window_ms),
            quota=quota,
            tokens=tokens,
            rate=finite(row.get("rate")),
            throttle_time_ms=finite(row.get("throttle_time_ms")),
            admitted_total=finite(row.get("admitted_total")),
            throttled_total=finite(row.get("throttled_total")),
            client=Client.from_row(row),
        )

    def _bucket(self) -> TokenBucket:
        bucket = TokenBucket(self.quota, self.window_ms, self.now_ms)
        credit = self.tokens * self.window_ms
        # the enforcer's credit is an integer for an integer quota; undo the float round trip
        bucket.credit = round(credit) if abs(credit - round(credit)) < 1e-6 else credit
        return bucket

    @property
    def wait_ms(self) -> int:
        """Event-time ms until a new PID would be admitted; 0 if now (or unlimited)."""
        if self.quota is None or self.tokens is None:
            return 0
        return self._bucket().try_take(self.now_ms)

    @property
    def throttled_until_ms(self) -> int | None:
        wait = self.wait_ms
        return self.now_ms + wait if wait > 0 else None

    @property
    def throttled(self) -> bool:
        return self.wait_ms > 0

    def requoted(self, quota: float | None, batch_id: int) -> UserState:
        """This state under a changed quota (None: unlimited), as of ``batch_id``."""
        if quota is None:
            return UserState(self.principal, self.now_ms, batch_id, self.window_ms, client=self.client)
        if self.quota is None or self.tokens is None:
            return replace(self, quota=float(quota), batch_id=batch_id)
        bucket = self._bucket()
        bucket.set_rate(quota)
        return replace(self, quota=float(quota), tokens=bucket.tokens, batch_id=batch_id)

    def fields(self) -> dict[str, str]:
        """The user's Redis hash: no None or NaN, floats rounded."""
        out = {"now_ms": str(self.now_ms), "batch_id": str(self.batch_id)}
        until = self.throttled_until_ms
        if until is not None:
            out["throttled_until_ms"] = str(until)
        digits = {"quota": None, "tokens": 3, "rate": 3, "throttle_time_ms": 0}
        digits.update(admitted_total=0, throttled_total=0)
        for name, d in digits.items():
            value = getattr(self, name)
            if value is not None:
                out[name] = shown(value, d)
        if self.client is not None:
            out.update({k: v for k, v in zip(COLUMNS, astuple(self.client), strict=True) if v})
        return out
