"""The token bucket that admits previously unseen PIDs."""

from __future__ import annotations


class TokenBucket:
    """A token bucket in event time, in the manner of Kafka's ``TokenBucket``.

    With R = ``producer_ids_rate`` (PIDs per window W):

    * refill rate ``Q = R / W`` tokens per second, capacity ``B = R``; it starts full;
    * refill ``tokens = min(B, tokens + Q * dt)``;
    * an unseen PID is admitted if ``tokens >= 1`` (and takes one token);
    * otherwise it waits ``throttle_time_ms = ceil((1 - tokens) / Q * 1000)``.

    Tokens are kept as *credit* in token-milliseconds-of-window: one token is
    ``W_ms`` credit, refill adds ``R * dt_ms``. For an integer R all of this is
    integer arithmetic, so throttle times are exact, with no float drift:
    ``throttle_time_ms = ceil((W_ms - credit) / R)``.

    Worked example, R = 100 per W = 3600 s: Q = 1/36 PID per second. 100 new
    PIDs at t = 0 empty the bucket; the 101st waits ceil(1 / Q * 1000) =
    36000 ms. At t = 18 s half a token has come back and a new PID waits
    18000 ms; at t = 36 s one is admitted. In any interval of length t at most
    R + Q * t new PIDs get in.
    """

    __slots__ = ("rate", "window_ms", "credit", "last_ms")

    def __init__(self, rate: float, window_ms: int, now_ms: int) -> None:
        if not rate > 0:
            raise ValueError(f"producer_ids_rate must be > 0, got {rate!r}")
        if window_ms < 1:
            raise ValueError(f"window must be >= 1 ms, got {window_ms}")
        self.rate = rate
        self.window_ms = int(window_ms)
        self.credit = self.capacity_credit  # starts full
        self.last_ms = int(now_ms)

    @property
    def capacity_credit(self) -> float:
        return self.rate * self.window_ms

    @property
    def tokens(self) -> float:
        return self.credit / self.window_ms

    @property
    def is_full(self) -> bool:
        return self.credit >= self.capacity_credit

    def refill(self, now_ms: int) -> None:
        if now_ms > self.last_ms:
            self.credit = min(self.capacity_credit, self.credit + self.rate * (now_ms - self.last_ms))
            self.last_ms = now_ms

    def try_take(self, now_ms: int) -> int:
        """Refill to ``now_ms``; take a token and return 0, or return the wait in ms."""
        self.refill(now_ms)
        if self.credit >= self.window_ms:
            self.credit -= self.window_ms
            return 0
        return int(-(-(self.window_ms - self.credit) // self.rate))  # ceil, exact for ints

    def full_at_ms(self) -> int:
        """Event time at which the bucket is full again if nothing is taken."""
        missing = self.capacity_credit - self.credit
        if missing <= 0:
            return self.last_ms
        return self.last_ms + int(-(-missing // self.rate))

    def set_rate(self, rate: float) -> None:
        """Apply a changed quota: new refill rate and capacity; what was spent stays spent.

        ``tokens = new R - (old R - tokens)``, within ``[0, new R]``: a user who
        used 2 of 2 has 998 of 1000 left after a raise to 1000, and one who used
        50 of 100 has 10 left after a cut to 60.
        """
        if not rate > 0:
            raise ValueError(f"producer_ids_rate must be > 0, got {rate!r}")
        spent = self.capacity_credit - self.credit
        self.rate = rate
        self.credit = min(self.capacity_credit, max(0, self.capacity_credit - spent))
