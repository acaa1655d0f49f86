"""The closed loop on stock controls: after an action, compare what the offender still gets
with its quota, and step the controls up or down. Pure and clock-free: ``now_ms`` is a
parameter, as in ``policy.py``.

pidquota reads what the brokers granted (the request log, the events), so each batch's
metrics row says how many new PIDs a principal was granted in it (``admitted`` +
``throttled``: pidquota's verdict does not stop the broker, which granted every PID pidquota
sees). A principal acted on stands at a **step** of a ladder (0: the mechanism's controls;
each step adds stricter ones, ``mechanisms.escalation_steps``). A step is judged by measures
of ``settle_ms`` each; what it achieved is measured from ``GRACE_MS`` after it was taken (a
change needs that long to reach every broker and to show in the input), in pidquota's own
wall-clock time at each batch, so a broker's clock skew changes nothing:

* granted = new PIDs seen since the step (less the grace), as a rate per window W:
  ``rate = seen * W / elapsed``;
* ``rate > over * quota`` (twice, by default) and a stricter step exists: **up** one step;
* ``rate <= quota`` and a looser step exists: **down** one step, once the step has stood
  ``settle_ms * 2**bounces``: a step down that was followed by a step up again (the offender
  was only held back by it) doubles the next wait, up to ``MAX_BOUNCES`` doublings;
* else the step stays and a new measure begins; at the top step and still over, the verdict
  says ``widen``: the same step, on whatever floods now as well (a client id that was not
  among the flooding ones when the step was taken).

Worked example: W = 60 s, quota 5 per W, settle 30 s, grace 2 s, two steps. The actuator acts on
``User:crash`` at t = 0 (step 0). Batches up to t = 30 s show 40 new PIDs granted after t = 2 s:
rate = 40 * 60 / 28 = 85.7 per W > 10: step 1 at t = 30 s. Up to t = 60 s, 12 more after
t = 32 s: 25.7 per W > 10: step 2. Up to t = 90 s, none: 0 <= 5, step 1 again; if the loop
is back at 30 per W by t = 120 s: step 2, and the next step down waits 60 s, not 30.
"""

from __future__ import annotations

from dataclasses import dataclass

GRACE_MS = 2_000  # a quota or ACL change reaches the brokers, and shows in the input, within it
MAX_BOUNCES = 5  # the longest wait before a step down: settle * 32


@dataclass
class Step:
    """One principal's place on the ladder, and the measure of what its step achieves."""

    level: int
    since_ms: int  # when this step was taken
    start_ms: int  # when the current measure began (counting from start_ms + grace)
    grace_ms: int
    seen: int = 0  # new PIDs granted since start_ms + grace_ms
    quota: float | None = None  # new PIDs per W (the newest metrics row's)
    bounces: int = 0
    went_down: bool = False  # the last change was a step down


@dataclass(frozen=True)
class Verdict:
    level: int
    rate: float  # new PIDs granted per W, as measured
    quota: float
    widen: bool = False  # the top step, still over: the same step on whatever floods now too

    @property
    def reason(self) -> str:
        return f"{self.rate:.1f} new PIDs granted per window, quota {self.quota:g}"


class Escalation:
    """The ladder of ``steps`` steps above step 0 for each principal acted on."""

    def __init__(
        self, steps: int, window_ms: int, settle_ms: int, over: float = 2.0, grace_ms: int = GRACE_MS
    ):
        self.steps, self.window_ms, self.settle_ms = steps, window_ms, settle_ms
        self.over, self.grace_ms = over, min(grace_ms, settle_ms // 2)
        self.at: dict[str, Step] = {}

    def level(self, principal: str) -> int:
        step = self.at.get(principal)
        return 0 if step is None else step.level

    def seed(self, principal: str, level: int, now_ms: int) -> None:
        """A principal newly acted on, at ``level`` (a restart finds the level its controls show)."""
        if principal not in self.at:
            level = max(0, min(level, self.steps))
            self.at[principal] = Step(level, now_ms, now_ms, self.grace_ms)

    def forget(self, principal: str) -> None:
        self.at.pop(principal, None)

    def observe(self, principal: str, new_pids: int, quota: float | None, now_ms: int) -> None:
        """One batch's new PIDs granted to ``principal``, seen at ``now_ms``."""
        step = self.at.get(principal)
        if step is None:
            return
        if quota is not None:
            step.quota = quota
        if now_ms > step.start_ms + step.grace_ms:  # a batch covers the time before it
            step.seen += max(0, int(new_pids))

    def judge(self, principal: str, now_ms: int) -> Verdict | None:
        """The principal's new step when it changes now, else None."""
        step = self.at.get(principal)
        if step is None or step.quota is None or step.quota <= 0:
            return None  # no quota (unlimited): nothing to compare with
        elapsed = now_ms - step.start_ms - step.grace_ms
        if now_ms - step.start_ms < self.settle_ms or elapsed <= 0:  # a measure spans settle_ms
            return None
        rate = step.seen * self.window_ms / elapsed
        level = step.level
        if rate > self.over * step.quota and level < self.steps:
            if step.went_down:
                step.bounces = min(step.bounces + 1, MAX_BOUNCES)
            self._move(step, level + 1, now_ms, down=False)
        elif rate <= step.quota and level > 0:
            if now_ms - step.since_ms < self.settle_ms * 2**step.bounces:
                return None  # keep measuring from the step: the longer wait is not over
            self._move(step, level - 1, now_ms, down=True)
        else:  # the step stays: a new measure
            still_over = rate > self.over * step.quota and level > 0
            step.start_ms, step.grace_ms, step.seen = now_ms, 0, 0
            return Verdict(level, rate, step.quota, widen=True) if still_over else None
        return Verdict(step.level, rate, step.quota)

    def _move(self, step: Step, level: int, now_ms: int, down: bool) -> None:
        step.level, step.since_ms, step.start_ms = level, now_ms, now_ms
        step.grace_ms, step.seen, step.went_down = self.grace_ms, 0, down
