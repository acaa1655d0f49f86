"""The actuator: the policy's plan carried out on the cluster's controls, each change
journalled first and undone exactly.

* **Apply** a control: read it (the operator's value), write a journal record, then set
  pidquota's value. A quota the operator already set as strict or stricter, or an ACL the
  operator already has, is left alone and not journalled: pidquota never creates nor
  deletes an ACL identical to one of the operator's.
* **Undo** a control: read it. Still pidquota's value: put the operator's back (or remove
  pidquota's key, or delete pidquota's ACL). Changed since by someone else: left as it is,
  and the action row says so. Then a tombstone in the journal.
* **Start** (:meth:`Actuator.reconcile`): the journal against the cluster. A control whose
  time is up is undone; a current one is kept, and set again if a crash came between its
  journal record and the change.
* **Dry run**: the same rows, marked ``dry_run``, and nothing read or changed.
* **Faults**: a control Kafka refuses or does not answer is an action row ``failed`` and a
  warning; the stream goes on and the next batch tries again.

Time is wall-clock ms, from ``clock`` (a parameter, for the tests).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pidquota.actuate.controls import AclBinding, Control, ControlError, QuotaKey
from pidquota.actuate.journal import Entry, JournalError
from pidquota.actuate.mechanisms import Mechanism
from pidquota.actuate.policy import Rails, plan

log = logging.getLogger("pidquota.actuate")


@dataclass(frozen=True)
class Action:
    """One row of the ``actions`` output."""

    at_ms: int
    principal: str
    action: str  # apply, extend, undo, keep, left, skipped, failed
    control: str
    before: float | bool | None = None
    value: float | bool | None = None
    until_ms: int | None = None
    dry_run: bool = False
    note: str = ""


class Actuator:
    """Carries out :func:`pidquota.actuate.policy.plan` with ``mechanism``'s controls on
    ``controls`` (None: a dry run), journalled in ``journal``."""

    def __init__(
        self,
        mechanism: Mechanism,
        rails: Rails,
        controls=None,
        journal=None,
        clock: Callable[[], float] = time.time,
    ):
        self.mechanism, self.rails = mechanism, rails
        self.controls, self.journal, self.clock = controls, journal, clock
        self.dry_run = controls is None
        self.entries: dict[Control, Entry] = {}  # what pidquota holds now (the journal's live records)
        self.acted: dict[str, int] = {}  # principal -> until_ms

    def _now(self) -> int:
        return int(self.clock() * 1000)

    def reconcile(self) -> list[Action]:
        """At start: undo what the journal holds whose time is up; keep (and re-set) the rest."""
        if self.dry_run:
            return []
        now, rows = self._now(), []
        for entry in self.journal.load().values():
            if entry.until_ms <= now:
                rows.append(self._undo(entry, now))
                continue
            self.entries[entry.control] = entry
            self.acted[entry.principal] = max(self.acted.get(entry.principal, 0), entry.until_ms)
            rows.append(self._ensure(entry, now))
        return rows

    def __call__(self, throttled: Mapping[str, int]) -> list[Action]:
        """One batch: ``throttled`` maps principals to the wall-clock ms their throttle ends."""
        now = self._now()
        todo = plan(throttled, self.acted, now, self.rails)
        rows = [Action(now, p, "skipped", self.mechanism.name, note=why) for p, why in todo.skipped.items()]
        for principal in todo.undo:
            rows += self._release(principal, now)
        for principal, until in todo.apply.items():
            rows += self._act(principal, until, now)
        for principal, until in todo.extend.items():
            rows += self._extend(principal, until, now)
        return rows

    def lift_all(self) -> list[Action]:
        """Undo everything pidquota holds now (``pidquota actuator lift``)."""
        now = self._now()
        rows = []
        for principal in sorted(self.acted):
            rows += self._release(principal, now)
        return rows

    # -- one principal -----------------------------------------------------------------
    def _act(self, principal: str, until: int, now: int) -> list[Action]:
        rows = [self._apply(principal, c, ours, until, now) for c, ours in self.mechanism.controls(principal)]
        if all(r.action != "failed" for r in rows):  # else the next batch tries them all again
            self.acted[principal] = until
        return rows

    def _extend(self, principal: str, until: int, now: int) -> list[Action]:
        rows = []
        self.acted[principal] = until
        for control, entry in list(self.entries.items()):
            if entry.principal == principal:
                longer = Entry(control, principal, entry.before, entry.ours, until)
                try:
                    if not self.dry_run:
                        self.journal.write(longer)
                except JournalError as exc:
                    rows.append(self._failed(principal, control, now, exc))
                    continue
                self.entries[control] = longer
        return rows

    def _release(self, principal: str, now: int) -> list[Action]:
        self.acted.pop(principal, None)
        mine = [e for e in self.entries.values() if e.principal == principal]
        if self.dry_run:
            return [
                Action(now, principal, "undo", c.name, dry_run=True)
                for c, _ in self.mechanism.controls(principal)
            ]
        return [self._undo(entry, now) for entry in mine]

    # -- one control -------------------------------------------------------------------
    def _apply(self, principal: str, control: Control, ours, until: int, now: int) -> Action:
        if self.dry_run:
            return Action(now, principal, "apply", control.name, value=ours, until_ms=until, dry_run=True)
        if control in self.entries:  # set by an earlier try whose other controls failed
            return Action(now, principal, "keep", control.name, self.entries[control].before, ours, until)
        try:
            before = self.controls.read(control)
            if _as_strict(control, before, ours):
                return Action(
                    now,
                    principal,
                    "keep",
                    control.name,
                    before,
                    before,
                    until,
                    note="the operator's own, as strict",
                )
            entry = Entry(control, principal, before, ours, until)
            self.journal.write(entry)  # first: a crash after it is seen at the restart
            self.entries[control] = entry
            self.controls.write(control, ours)
        except (ControlError, JournalError) as exc:
            return self._failed(principal, control, now, exc)
        return Action(now, principal, "apply", control.name, before, ours, until)

    def _ensure(self, entry: Entry, now: int) -> Action:
        try:
            current = self.controls.read(entry.control)
            if _same(current, entry.ours):
                return Action(
                    now, entry.principal, "keep", entry.control.name, entry.before, entry.ours, entry.until_ms
                )
            if _same(current, entry.before):
                self.controls.write(entry.control, entry.ours)
                return Action(
                    now,
                    entry.principal,
                    "apply",
                    entry.control.name,
                    entry.before,
                    entry.ours,
                    entry.until_ms,
                    note="set again: the journal had it and the cluster did not",
                )
        except ControlError as exc:
            return self._failed(entry.principal, entry.control, now, exc)
        return self._undo(entry, now)  # someone changed it meanwhile: theirs now

    def _undo(self, entry: Entry, now: int) -> Action:
        control = entry.control
        try:
            current = self.controls.read(control)
            if _same(current, entry.ours) and not _same(entry.ours, entry.before):
                self.controls.write(control, entry.before)
                row = Action(now, entry.principal, "undo", control.name, current, entry.before)
            elif _same(current, entry.before):
                row = Action(
                    now,
                    entry.principal,
                    "undo",
                    control.name,
                    current,
                    current,
                    note="already as the operator had it",
                )
            else:
                row = Action(
                    now,
                    entry.principal,
                    "left",
                    control.name,
                    entry.ours,
                    current,
                    note=f"changed since pidquota set it (to {_shown(current)}): left as it is",
                )
                log.warning("pidquota: %s for %s %s", control.name, entry.principal, row.note)
            self.journal.remove(control)
        except (ControlError, JournalError) as exc:
            return self._failed(entry.principal, control, now, exc)
        self.entries.pop(control, None)
        return row

    def _failed(self, principal: str, control: Control, now: int, exc: Exception) -> Action:
        log.warning("pidquota: actuator: %s (tried again at the next batch)", exc)
        return Action(now, principal, "failed", control.name, note=str(exc))


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) < 1e-9
    return a == b


def _as_strict(control: Control, before, ours) -> bool:
    """The operator's value already does what pidquota's would (a quota as low or lower,
    the same ACL)."""
    if isinstance(control, QuotaKey):
        return before is not None and float(before) <= float(ours)
    assert isinstance(control, AclBinding)
    return bool(before)


def _shown(value) -> str:
    return "absent" if value is None or value is False else str(value)
