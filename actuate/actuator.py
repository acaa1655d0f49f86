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
* **Dry run**: the same rows, marked ``dry_run``, and nothing changed; with ``peek`` (the
  cluster's controls, read only) each row shows the operator's value, and a quota the
  operator already set as strict is a ``keep``, as the run would do.
* **Faults**: a control Kafka refuses or does not answer is an action row ``failed`` and a
  warning; the stream goes on and the next batch tries again.

Time is wall-clock ms, from ``clock`` (a parameter, for the tests).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from pidquota.actuate.controls import (
    AclBinding,
    ClientQuotaKey,
    ClientThrottleKey,
    Control,
    ControlError,
    QuotaKey,
    ThrottleKey,
    same_value,
    shown_value,
)
from pidquota.actuate.journal import SET, SETTING, UNDOING, Entry, JournalError, JournalFenced
from pidquota.actuate.mechanisms import Mechanism
from pidquota.actuate.policy import Rails, next_hold, plan

log = logging.getLogger("pidquota.actuate")
MOST_CLIENTS = 3  # a flood spread over more client ids than this: the whole principal


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
        peek=None,
    ):
        self.mechanism, self.rails = mechanism, rails
        self.controls, self.journal, self.clock = controls, journal, clock
        self.dry_run = controls is None
        self.peek = peek  # a dry run's read-only look at the cluster (None: the values are not read)
        self.entries: dict[Control, Entry] = {}  # what pidquota holds now (the journal's live records)
        self.acted: dict[str, int] = {}  # principal -> until_ms
        self.theirs: dict[Control, str] = {}  # controls the operator set as strict -> the acted principal
        self.addresses: dict[str, tuple[str, ...]] = {}  # principal -> the addresses it has to itself
        # principal -> its controls undone while it is still acted on (one undo failed, or the
        # operator took one back): never set again until the principal is let go
        self.ended: dict[str, set[Control]] = {}
        self.fenced: JournalFenced | None = None  # another run took the journal over: act no more
        # principal -> the controls its closed-loop step adds to the mechanism's (escalation.py)
        self.extra: dict[str, list[tuple[Control, object]]] = {}
        # principal -> its flooding client ids, for a mechanism that narrows to them
        self.clients: dict[str, tuple[str, ...]] = {}
        # principal -> controls of a step it left whose undo failed: undone again at each batch
        self.stale: dict[str, set[Control]] = {}
        self.holds: dict[str, int] = {}  # principal acted on -> its hold, where not the base (a relapse's)
        self.last_hold: dict[str, tuple[int, int]] = {}  # principal let go -> (its hold, undone at ms)

    def _now(self) -> int:
        return int(self.clock() * 1000)

    def reconcile(self) -> list[Action]:
        """At start: undo what the journal holds whose time is up; keep (and re-set) the rest.
        An undo that fails is kept, and tried again at the next batch."""
        if self.dry_run:
            return []
        now, rows = self._now(), []
        for entry in self.journal.load().values():
            self.entries[entry.control] = entry
            self.acted[entry.principal] = max(self.acted.get(entry.principal, 0), entry.until_ms)
        for entry in list(self.entries.values()):  # an undo a crash interrupted is finished, held or not
            done = entry.until_ms <= now or entry.state == UNDOING
            rows.append(self._undo(entry, now) if done else self._ensure(entry, now))
        for principal in list(self.acted):
            if not self._holds(principal):  # let go: acted on again later, all its controls are set
                self.acted.pop(principal)
                self.ended.pop(principal, None)
            else:
                narrowed = [
                    c.client_id
                    for c in self.entries
                    if isinstance(c, ClientThrottleKey) and c.principal == principal
                ]
                if narrowed:  # narrowed before: not widened to the whole user by the restart
                    self.clients[principal] = tuple(sorted(narrowed))
                self.extra[principal] = self.stepped(principal)  # the closed loop's step it stood at
        return rows

    def stepped(self, principal: str) -> list[tuple[Control, object]]:
        """The controls pidquota holds for ``principal`` beyond its mechanism's own (with the
        client ids it narrowed to): a closed loop's step (a client's quota, ACLs where the
        mechanism sets none, the whole user's plug-in throttle over a narrowed one)."""
        base = {c for c, _ in self.mechanism.controls(principal, (), self.clients.get(principal, ()))}
        return [
            (c, e.ours)
            for c, e in sorted(self.entries.items(), key=lambda ce: ce[0].name)
            if e.principal == principal
            and c not in base
            and isinstance(c, ClientQuotaKey | AclBinding | ThrottleKey)
        ]

    def relevel(self, principal: str, extra: list[tuple[Control, object]], note: str) -> list[Action]:
        """The closed loop moved ``principal`` to another step: its controls are now the
        mechanism's and ``extra``. Controls of the old step that the new one has not are undone
        (exactly, as at the end); new ones applied. Each row carries ``note``."""
        if self.fenced is not None or principal not in self.acted:
            return []
        now, old = self._now(), self.extra.get(principal, [])
        self.extra[principal] = list(extra)
        keep = {c for c, _ in self._controls(principal)}  # the mechanism's own stay too
        ended = self.ended.setdefault(principal, set())
        rows = []
        for control, _ in old:
            if control in keep:
                continue
            if self.dry_run:
                rows.append(Action(now, principal, "undo", control.name, dry_run=True))
            elif control in self.entries:
                rows.append(self._undo(self.entries[control], now))
                if control in self.entries:  # failed: undone again at the next batch
                    self.stale.setdefault(principal, set()).add(control)
            self.theirs.pop(control, None)
            ended.discard(control)  # a later step up may set it again
        for control, ours in extra:
            if control not in {c for c, _ in old} and control not in self.entries and self.fenced is None:
                ended.discard(control)
                rows.append(self._apply(principal, control, ours, self.acted[principal], now))
        return [replace(r, note=f"{note}; {r.note}" if r.note else note) for r in rows]

    def __call__(
        self,
        throttled: Mapping[str, int],
        addresses: Mapping[str, tuple[str, ...]] | None = None,
        shared: set[str] | frozenset[str] = frozenset(),
        clients: Mapping[str, tuple[str, ...]] | None = None,
    ) -> list[Action]:
        """One batch: ``throttled`` maps principals to the wall-clock ms their throttle ends;
        ``addresses``, to the client addresses each has to itself (an address-based mechanism
        acts on them too, and on one that turns up later while the principal is acted on);
        ``shared``: addresses now seen from another principal too, whose controls are undone."""
        if self.fenced is not None:
            return []
        now = self._now()
        rows = self._unshare(shared, now) if shared else []
        for principal, seen in (addresses or {}).items():  # its newest own addresses now
            self.addresses[principal] = tuple(a for a in seen if a not in shared)
        for principal, flooding in (clients or {}).items():  # picked once, at the first action
            self.clients[principal] = self._picked(principal, flooding)
        holds = self._holds_now(throttled, now)
        todo = plan(throttled, self.acted, now, self.rails, holds)
        releasing = set(todo.undo)  # its controls go, and none comes back: they live and die together
        for principal in todo.undo:
            rows += self._release(principal, now)
        if todo.undo:  # the slots the undos freed, for this batch; a pending undo still holds one
            holds = self._holds_now(throttled, now)
            todo = plan(throttled, self.acted, now, self.rails, holds)
        rows += [Action(now, p, "skipped", self.mechanism.name, note=why) for p, why in todo.skipped.items()]
        for principal in set(self.addresses) - set(self.acted) - set(todo.apply):
            del self.addresses[principal]  # throttled but skipped (allow-list, capped): nothing held
        for principal, until in todo.apply.items():
            hold = holds.get(principal, self.rails.hold_ms)
            acted = self._act(principal, until, now)
            if hold != self.rails.hold_ms:
                self.holds[principal] = hold
                note = f"hold {hold / 1000:g} s: throttled again within its last hold of its undo"
                acted = [replace(r, note=f"{r.note}; {note}" if r.note else note) for r in acted]
            rows += acted
        for principal, until in todo.extend.items():
            rows += self._extend(principal, until, now)
        for principal in set(self.clients) - set(self.acted):
            del self.clients[principal]  # throttled but not acted on (allow-list, capped): nothing held
        if not self.dry_run:  # what an earlier batch could not set, or undo: tried again
            rows += self._unstale(now)
            for principal in sorted(set(self.acted) - set(todo.apply) - releasing):
                rows += self._act(principal, self.acted[principal], now, missing_only=True)
        return rows

    def _holds_now(self, throttled: Mapping[str, int], now: int) -> dict[str, int]:
        """Each principal's hold where it is not the base: those acted on, as they were set; a
        relapse about to be acted on, longer (:func:`next_hold`). Releases older than their hold
        are forgotten (a bounded map)."""
        for principal, (hold, undone_at) in list(self.last_hold.items()):
            if now - undone_at > hold:
                del self.last_hold[principal]
        out = dict(self.holds)
        for principal in throttled:
            if principal not in self.acted and principal in self.last_hold:
                hold = next_hold(self.rails.hold_ms, self.last_hold[principal], now)
                if hold != self.rails.hold_ms:
                    out[principal] = hold
        return out

    def _picked(self, principal: str, flooding: tuple[str, ...]) -> tuple[str, ...]:
        """The client ids a narrowing mechanism acts on for ``principal``: picked when it is
        first acted on (none, the whole principal, when unknown or more than ``MOST_CLIENTS``)
        and kept while it is; the closed loop, not a new pick, decides whether the narrowed
        throttle is enough (a well-behaved application of the user, throttled by pidquota while
        the user's bucket is empty, would look like the next flood)."""
        had = self.clients.get(principal)
        if principal in self.acted and had is not None:
            return had
        return tuple(sorted(set(flooding))) if 0 < len(set(flooding)) <= MOST_CLIENTS else ()

    def _unstale(self, now: int) -> list[Action]:
        """Undo again the controls of a step the closed loop left whose undo failed."""
        rows = []
        for principal, controls in list(self.stale.items()):
            wanted = {c for c, _ in self._controls(principal)}
            for control in sorted(controls, key=lambda c: c.name):
                if control in self.entries and control not in wanted and self.fenced is None:
                    rows.append(self._undo(self.entries[control], now))
                if control not in self.entries or control in wanted:
                    controls.discard(control)
            if not controls:
                del self.stale[principal]
        return rows

    def held_addresses(self) -> dict[str, str]:
        """The addresses pidquota holds a control on now, with the principal it is for."""
        return {
            c.entity: e.principal
            for c, e in self.entries.items()
            if isinstance(c, QuotaKey) and c.entity_type == "ip"
        }

    def _unshare(self, shared, now: int) -> list[Action]:
        """Undo the address controls of addresses another principal turned out to use too (an
        undo that fails is kept, and ``shared`` names it again at the next batch)."""
        for principal, known in list(self.addresses.items()):
            self.addresses[principal] = tuple(a for a in known if a not in shared)
        ip = [e for c, e in self.entries.items() if isinstance(c, QuotaKey) and c.entity_type == "ip"]
        rows = [self._undo(e, now) for e in ip if e.control.entity in shared]
        return [replace(r, note=r.note or "the address is shared with another principal") for r in rows]

    def lift_journal(self) -> list[Action]:
        """Undo everything the journal holds, current or not (``pidquota actuator lift``, from
        outside the run: it reads the journal, not this process's memory)."""
        now = self._now()
        self.entries = dict(self.journal.load())
        rows = [self._undo(entry, now) for entry in list(self.entries.values())]
        self.acted.clear()
        return rows

    def held(self) -> list[tuple[Entry, object]]:
        """Each journal record with the control's value on the cluster now (``pidquota
        actuator status``)."""
        return [(e, self.controls.read(e.control)) for e in self.journal.load().values()]

    def lift_all(self) -> list[Action]:
        """Undo everything this actuator holds now (the run's end); nothing once fenced: the
        journal's new owner holds it."""
        if self.fenced is not None:
            raise self.fenced
        now = self._now()
        rows = []
        for principal in sorted(self.acted):
            rows += self._release(principal, now)
        return rows

    # -- one principal -----------------------------------------------------------------
    def _controls(self, principal: str) -> list[tuple[Control, object]]:
        """The principal's controls now: its mechanism's, and its closed-loop step's."""
        base = self.mechanism.controls(
            principal, self.addresses.get(principal, ()), self.clients.get(principal, ())
        )
        return base + self.extra.get(principal, [])

    def _holds(self, principal: str) -> bool:
        return any(e.principal == principal for e in self.entries.values())

    def _act(self, principal: str, until: int, now: int, missing_only: bool = False) -> list[Action]:
        """Apply the mechanism's controls; with ``missing_only``, those an earlier try did not
        set. The principal is acted on from the first try: what fails is tried again at each
        batch, and whatever was set is undone when its time is up."""
        rows = []
        if not missing_only:  # acted on anew: what an earlier spell undid is its to set again
            self.ended.pop(principal, None)
        ended = self.ended.get(principal, set())
        for control, ours in self._controls(principal):
            if self.fenced is not None:  # another run owns the journal now: nothing more
                break
            held = self.entries.get(control)
            if missing_only and (
                control in self.theirs or control in ended or (held is not None and held.state != SETTING)
            ):
                continue
            rows.append(self._apply(principal, control, ours, until, now))
        self.acted[principal] = until
        return rows

    def _extend(self, principal: str, until: int, now: int) -> list[Action]:
        rows = []
        self.acted[principal] = until
        for control, entry in list(self.entries.items()):
            if entry.principal == principal:
                longer = replace(entry, until_ms=until)
                try:
                    if not self.dry_run:
                        self.journal.write(longer)
                except JournalError as exc:
                    rows.append(self._failed(principal, control, now, exc))
                    continue
                self.entries[control] = longer
        return rows

    def _release(self, principal: str, now: int) -> list[Action]:
        """Undo the principal's controls; it stays acted on until every one is undone (a
        failed undo is tried again at the next batch)."""
        if self.dry_run:
            rows = [
                Action(now, principal, "undo", c.name, dry_run=True) for c, _ in self._controls(principal)
            ]
            self.acted.pop(principal, None)
            self.addresses.pop(principal, None)
            self.extra.pop(principal, None)
            self.clients.pop(principal, None)
            return rows
        mine = [e for e in self.entries.values() if e.principal == principal]
        rows = [self._undo(entry, now) for entry in mine]
        if not self._holds(principal):
            self.last_hold[principal] = (self.holds.pop(principal, self.rails.hold_ms), now)
            self.acted.pop(principal, None)
            self.addresses.pop(principal, None)
            self.extra.pop(principal, None)
            self.clients.pop(principal, None)
            self.stale.pop(principal, None)
            self.ended.pop(principal, None)
            self.theirs = {c: p for c, p in self.theirs.items() if p != principal}
        return rows

    # -- one control -------------------------------------------------------------------
    def _apply(self, principal: str, control: Control, ours, until: int, now: int) -> Action:
        if self.dry_run:
            return self._dry_apply(principal, control, ours, until, now)
        if control in self.entries:
            return self._ensure(self.entries[control], now)
        try:
            before = self.controls.read(control)
            effective, whose = self._effective(control, before)
            if _as_strict(control, effective, ours):
                self.theirs[control] = principal
                return Action(now, principal, "keep", control.name, before, effective, until, note=whose)
            entry = Entry(control, principal, before, ours, until, SETTING)
            self.journal.write(entry)  # first: a crash after it is seen at the restart
            self.entries[control] = entry
            self.controls.write(control, ours)
            self._journal(replace(entry, state=SET))
        except (ControlError, JournalError) as exc:
            return self._failed(principal, control, now, exc)
        return Action(now, principal, "apply", control.name, before, ours, until)

    def _dry_apply(self, principal: str, control: Control, ours, until: int, now: int) -> Action:
        """What :meth:`_apply` would do, read with ``peek`` and changing nothing."""
        if self.peek is None:  # no cluster given: the banner says the values are not read
            return Action(now, principal, "apply", control.name, None, ours, until, dry_run=True)
        if isinstance(
            control, ThrottleKey | ClientThrottleKey
        ):  # the plug-in's state is pidquota's own, never the
            return Action(
                now, principal, "apply", control.name, False, ours, until, dry_run=True
            )  # operator's
        try:
            before = self.peek.read(control)
            effective, whose = self._effective(control, before, self.peek)
        except ControlError as exc:
            note = f"the operator's value is not read: {exc}"
            return Action(now, principal, "apply", control.name, None, ours, until, dry_run=True, note=note)
        if _as_strict(control, effective, ours):
            return Action(
                now, principal, "keep", control.name, before, effective, until, dry_run=True, note=whose
            )
        return Action(now, principal, "apply", control.name, before, ours, until, dry_run=True)

    def _effective(self, control: Control, before, controls=None) -> tuple[object, str]:
        """The value that applies to the principal now, Kafka's precedence included: a quota
        key the entity does not have falls back to the entity type's ``<default>``, which a
        user-level value would override, so a stricter default must be kept, never loosened.
        With the note an action row gives when the operator's value is kept."""
        if isinstance(control, ClientQuotaKey) and before is None:
            return self._users_own(control, controls or self.controls)
        if isinstance(control, QuotaKey) and before is None:
            default = (controls or self.controls).default_quota(control)
            if default is not None:
                return default, (
                    f"the operator's {control.entity_type} <default> ({shown_value(default)}) is as strict: "
                    "a quota on the entity would loosen it"
                )
        return before, "the operator's own, as strict"

    def _users_own(self, control: ClientQuotaKey, controls) -> tuple[object, str]:
        """A client's quota overrides its user's (Kafka's precedence): the operator's user
        quota, the journal's ``before`` when pidquota holds that key, applies to the client
        until then, so a stricter one must be kept, never loosened."""
        user = QuotaKey("user", control.user, control.key)
        held = self.entries.get(user)
        value = held.before if held is not None else controls.read(user)
        note = (
            f"the operator's user quota ({shown_value(value)}) is as strict: a client quota would loosen it"
        )
        return value, note

    def _journal(self, entry: Entry) -> None:
        """Record how far a change got; a record that is not written leaves the last one, which
        a restart reads the safe way."""
        try:
            self.journal.write(entry)
            self.entries[entry.control] = entry
        except JournalFenced as exc:  # another run owns the journal now: this one acts no more
            self.fenced = self.fenced or exc
            log.warning("pidquota: actuator: %s", exc)
        except JournalError as exc:
            log.warning("pidquota: actuator: %s (the change itself is made)", exc)

    def _ensure(self, entry: Entry, now: int) -> Action:
        """A current record: pidquota's value on the cluster, or set again if a crash (or a
        failed write) came before it was; an operator's value put back meanwhile is theirs."""
        try:
            current = self.controls.read(entry.control)
            if same_value(current, entry.ours):
                if entry.state != SET:
                    self._journal(replace(entry, state=SET))
                return Action(
                    now, entry.principal, "keep", entry.control.name, entry.before, entry.ours, entry.until_ms
                )
            if same_value(current, entry.before) and entry.state == SETTING:
                self.journal.write(entry)  # journalled again first: a fenced run stops here
                self.controls.write(entry.control, entry.ours)
                self._journal(replace(entry, state=SET))
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
        except (ControlError, JournalError) as exc:
            return self._failed(entry.principal, entry.control, now, exc)
        return self._undo(entry, now)  # someone changed it meanwhile: theirs now

    def _undo(self, entry: Entry, now: int) -> Action:
        """Put the operator's value back if pidquota's is still there, journalled ``undoing``
        first; then a tombstone. A failure keeps the entry, for the next batch to try again."""
        control = entry.control
        try:
            current = self.controls.read(control)
            if same_value(current, entry.ours) and not same_value(entry.ours, entry.before):
                entry = replace(entry, state=UNDOING)
                self.journal.write(entry)  # every time, first: a fenced run stops here
                self.entries[control] = entry
                self.controls.write(control, entry.before)
                row = Action(now, entry.principal, "undo", control.name, current, entry.before)
            elif same_value(current, entry.before):
                note = "already as the operator had it"
                row = Action(now, entry.principal, "undo", control.name, current, current, note=note)
            else:
                note = f"changed since pidquota set it (to {shown_value(current)}): left as it is"
                row = Action(now, entry.principal, "left", control.name, entry.ours, current, note=note)
                log.warning("pidquota: %s for %s %s", control.name, entry.principal, row.note)
            self.journal.remove(control)
        except (ControlError, JournalError) as exc:
            self.entries[control] = entry
            return self._failed(entry.principal, control, now, exc)
        self.entries.pop(control, None)
        self.ended.setdefault(entry.principal, set()).add(control)
        return row

    def _failed(self, principal: str, control: Control, now: int, exc: Exception) -> Action:
        if isinstance(exc, JournalFenced):
            if self.fenced is None:
                log.warning("pidquota: actuator: %s", exc)
            self.fenced = exc
            return Action(now, principal, "failed", control.name, note=str(exc))
        log.warning("pidquota: actuator: %s (tried again at the next batch)", exc)
        return Action(now, principal, "failed", control.name, note=str(exc))


def _as_strict(control: Control, before, ours) -> bool:
    """The operator's value already does what pidquota's would (a quota as low or lower,
    the same ACL)."""
    if isinstance(control, QuotaKey | ClientQuotaKey):
        return before is not None and float(before) <= float(ours)
    return bool(before)  # an ACL, or a plug-in throttle, already there
