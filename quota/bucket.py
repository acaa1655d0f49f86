"""The token bucket that admits previously unseen PIDs."""

from __future__ import annotations

# Float credit (a fractional R) may land a few ulps short of a whole token
# after the wait the bucket itself announced. Credit within this fraction of
# a token counts as the token, so ``throttle_time_ms`` is always long enough.
# It is below 1 ms of credit for any window up to 7 days, so integer credit
# (an integer R) is unaffected and stays exact.
SLACK = 1e-9


class TokenBucket:
    """A token bucket in event time, in the manner of Kafka's ``TokenBucket``.

    With R = ``producer_ids_rate`` (PIDs per window W, a Double as in KIP-936):

    * refill rate ``Q = R / W`` tokens per second, capacity ``B = max(R, 1)``;
      it starts full;
    * refill ``tokens = min(B, tokens + Q * dt)``;
    * an unseen PID is admitted if ``tokens >= 1`` (and takes one token);
    * otherwise it waits ``throttle_time_ms = ceil((1 - tokens) / Q * 1000)``.

    The capacity is at least one token because a PID costs one whole token: a
    bucket of B = R < 1 could never hold a token, and every wait it announced
    would be a lie. With B = max(R, 1) a rate below one PID per window is a
    rate, and after ``throttle_time_ms`` the PID is admitted. For R >= 1 this
    is B = R, KIP-936's burst.

    Tokens are kept as *credit* in token-milliseconds-of-window: one token is
    ``W_ms`` credit, refill adds ``R * dt_ms``. For an integer R all of this is
    integer arithmetic, so throttle times are exact, with no float drift:
    ``throttle_time_ms = ceil((W_ms - credit) / R)``.

    Worked example, R = 100 per W = 3600 s: Q = 1/36 PID per second. 100 new
    PIDs at t = 0 empty the bucket; the 101st waits ceil(1 / Q * 1000) =
    36000 ms. At t = 18 s half a token has come back and a new PID waits
    18000 ms; at t = 36 s one is admitted. In any interval of length t at most
    B + Q * t new PIDs get in.

    Worked example, R = 0.5 per W = 3600 s: B = 1, Q = 1 per 7200 s. The first
    new PID at t = 0 is admitted and empties the bucket; the next waits
    ceil(1 / Q * 1000) = 7200000 ms (2 h); at t = 1 h it waits 3600000 ms, and
    at t = 2 h it is admitted. Sustained: one new PID every 2 h, half a PID
    per window.
    """

    __slots__ = ("rate", "window_ms", "credit", "last_ms")

    def __init__(self, rate: float, window_ms: int, now_ms: int) -> None:
        _check_rate(rate)
        _check_window(window_ms)
        self.rate = rate
        self.window_ms = int(window_ms)
        self.credit = self.capacity_credit  # starts full
        self.last_ms = int(now_ms)

    @property
    def capacity(self) -> float:
        """B = max(R, 1) tokens."""
        return self.rate if self.rate > 1 else 1

    @property
    def capacity_credit(self) -> float:
        return self.capacity * self.window_ms

    @property
    def tokens(self) -> float:
        return self.credit / self.window_ms

    @property
    def is_full(self) -> bool:
        return self.credit >= self.capacity_credit

    def credit_at(self, now_ms: int):
        """The credit at ``now_ms`` (refilled from ``last_ms``, capped), without taking it."""
        if now_ms <= self.last_ms:
            return self.credit
        credit = self.credit + self.rate * (now_ms - self.last_ms)
        cap = self.capacity_credit
        return cap if credit >= cap - SLACK * self.window_ms else credit

    def refill(self, now_ms: int) -> None:
        if now_ms > self.last_ms:
            self.credit = self.credit_at(now_ms)
            self.last_ms = now_ms

    def try_take(self, now_ms: int) -> int:
        """Take a token at ``now_ms`` and return 0, or return the wait in ms.

        Only a take moves the bucket: a refusal leaves it as it was, so the
        credit at any time is one refill from the last take (or the last
        :meth:`refill`), whatever was refused in between. With an integer R
        this is the same arithmetic as refilling at every request; it also
        lets a batch of requests be judged at once (``quota/batch.py``).
        """
        credit = self.credit_at(now_ms)
        missing = self.window_ms - credit
        if missing <= SLACK * self.window_ms:
            self.credit = max(0, credit - self.window_ms)
            self.last_ms = max(self.last_ms, now_ms)
            return 0
        return int(-(-missing // self.rate))  # ceil, exact for ints

    def full_at_ms(self) -> int:
        """Event time at which the bucket is full again if nothing is taken."""
        missing = self.capacity_credit - self.credit
        if missing <= 0:
            return self.last_ms
        return self.last_ms + int(-(-missing // self.rate))

    def set_rate(self, rate: float) -> None:
        """Apply a changed quota: new refill rate and capacity; what was spent stays spent.

        ``tokens = new B - (old B - tokens)``, within ``[0, new B]``, with
        ``B = max(R, 1)``: a user who used 2 of 2 has 998 of 1000 left after a
        raise to 1000, one who used 50 of 100 has 10 left after a cut to 60,
        and one who used 1 of 100 has none left after a cut to 0.5.
        """
        _check_rate(rate)
        spent = self.capacity_credit - self.credit
        self.rate = rate
        self.credit = min(self.capacity_credit, max(0, self.capacity_credit - spent))

    def set_window(self, window_ms: int) -> None:
        """Adopt a changed window W (a restart with new settings); keep the tokens.

        The credit is token·ms of the old window, so it is rescaled: ``credit
        * new W / old W`` (rounded down for integer credit, so nothing is
        gained). A user who had spent the bucket has still spent it, and a
        full bucket stays full, at ``B`` tokens, whatever W. Only the refill
        changes, to ``R / new W``. Example, R = 100: 40 tokens left under
        W = 3600 s are 40 tokens under W = 60 s, refilled at 100 a minute.
        """
        _check_window(window_ms)
        window_ms = int(window_ms)
        if window_ms == self.window_ms:
            return
        if isinstance(self.credit, int):
            credit = self.credit * window_ms // self.window_ms
        else:
            credit = self.credit / self.window_ms * window_ms
        self.window_ms = window_ms
        self.credit = min(self.capacity_credit, max(0, credit))


def _check_rate(rate: float) -> None:
    if not rate > 0:
        raise ValueError(f"producer_ids_rate must be > 0, got {rate!r}")


def _check_window(window_ms: int) -> None:
    if window_ms < 1:
        raise ValueError(f"window must be >= 1 ms, got {window_ms}")
