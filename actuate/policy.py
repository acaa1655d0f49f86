"""Which principals to act on, and which to let go: pure, clock-free (``now_ms`` is a
parameter), as ``quota/`` is.

A principal is **acted on** while pidquota throttles it, and for ``hold_ms`` after its
throttle ends; then the action is undone. ``throttled`` maps each principal that a batch
throttled to the wall-clock ms its throttle ends (the batch's time plus the user's
``throttle_time_ms``); ``acted`` maps each principal acted on to the ms its action ends.

Rails: a principal on the ``allow`` list is never acted on (the brokers' own principal,
admins); at most ``cap`` principals are acted on at once, the others are reported
``capped`` and tried again at the next batch. A principal whose undo is due still holds its
slot until the actuator has let it go (an undo can fail and be pending for batches); the
actuator plans again after its undos, so a slot they free is used in the same batch. Only a ``User:`` principal is a Kafka user
that quotas and ACLs can name: another (``Topic:orders``, the log audit's name for a
topic's PIDs when no owner is known) is reported ``skipped`` once, never sent to the
cluster.

A principal throttled again within one hold of its undo is a **relapse**: its next hold is
twice its last (:func:`next_hold`, at most ``MAX_HOLD_MS`` or the base hold if longer), so a
short hold does not flap (a throttle that works hides the flood that made it, its hold ends,
the flood comes back); one that stays away for a hold starts again from the base. ``holds``
gives :func:`plan` each principal's hold where it is not the base.

Worked example: hold 60 s, cap 2. At t=0 ``User:a`` is throttled until t=5 s and
``User:b`` until t=2 s: both are applied, ``a`` until 65 s and ``b`` until 62 s. At t=10 s
``User:c`` is throttled too: capped (2 already). At t=63 s nothing is throttled: ``b`` is
to be undone, ``a`` is kept; at t=66 s ``a`` is undone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pidquota.conf.settings import principal_problem

USER = "User:"
NOT_A_USER = (
    "not a Kafka user: no quota or ACL can name it (a topic's PIDs without a known owner: "
    "give the topic an owner in pidquota.audit.owners)"
)


MAX_HOLD_MS = 3_600_000  # a relapse's hold grows to an hour at most


def next_hold(base_ms: int, last: tuple[int, int] | None, now_ms: int) -> int:
    """The hold of a principal acted on at ``now_ms``: ``last`` is its last ``(hold_ms,
    undone_at_ms)``, if any; back within that hold of its undo, twice that hold (at most
    ``MAX_HOLD_MS``, or ``base_ms`` if longer), else ``base_ms``.

    Worked example: base 20 s; undone at t=100 s after a hold of 20 s and throttled again at
    t=110 s: 40 s; that one undone at 200 s, back at 230 s (within its 40 s): 80 s; back at
    250 s instead (50 s after, over its 40 s): 20 s again."""
    if last is None:
        return base_ms
    hold, undone_at = last
    if now_ms - undone_at > hold:
        return base_ms
    return max(base_ms, min(2 * hold, MAX_HOLD_MS))


@dataclass(frozen=True)
class Rails:
    hold_ms: int
    cap: int
    allow: frozenset[str] = frozenset()


@dataclass
class Plan:
    """What to do now: ``apply`` and ``extend`` map principals to their new end (ms),
    ``undo`` lists principals whose action ended, ``skipped`` says why a throttled
    principal is left alone (``allow-list`` or ``capped``)."""

    apply: dict[str, int] = field(default_factory=dict)
    extend: dict[str, int] = field(default_factory=dict)
    undo: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def plan(
    throttled: Mapping[str, int],
    acted: Mapping[str, int],
    now_ms: int,
    rails: Rails,
    holds: Mapping[str, int] | None = None,
) -> Plan:
    """The actions for ``now_ms`` (see the module docstring); ``holds``: a principal's hold
    where it is not ``rails.hold_ms`` (a relapse's)."""
    out = Plan()
    holds = holds or {}
    for principal, until in acted.items():
        hold = holds.get(principal, rails.hold_ms)
        end = max(until, throttled.get(principal, until - hold) + hold)
        if principal in rails.allow or end <= now_ms:
            out.undo.append(principal)  # an allow-listed principal acted on before the list said so
        elif end > until:
            out.extend[principal] = end
    room = rails.cap - len(acted)  # a principal whose undo is pending holds its slot until it is let go
    for principal in sorted(throttled, key=lambda p: (-throttled[p], p)):
        end = throttled[principal] + holds.get(principal, rails.hold_ms)
        if principal in acted:
            continue
        if principal in rails.allow:
            out.skipped[principal] = "allow-list"
        elif not principal.startswith(USER):
            out.skipped[principal] = NOT_A_USER
        elif (why := principal_problem(principal)) is not None:
            out.skipped[principal] = f"never sent to the cluster: {why}"
        elif end <= now_ms:
            continue
        elif room <= 0:
            out.skipped[principal] = "capped"
        else:
            out.apply[principal] = end
            room -= 1
    out.undo.sort()
    return out
