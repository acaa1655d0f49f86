"""The actuator inside a run: built from the settings, fed each batch's metrics rows, and
stopped with the run.

A principal is **throttled** in a batch when its metrics row says so: new PIDs were
throttled in the batch (``throttled`` > 0), or its bucket still makes a new PID wait
(``wait_ms`` > 0, the bucket's own answer, as Redis publishes it:
:class:`pidquota.quota.user_state.UserState`). Its throttle ends ``wait_ms`` after the
batch, in wall-clock time: ``until = now + wait_ms``; the policy adds the hold.

Worked example: at wall-clock ``now`` = 1,000,000 ms a batch has ``User:crash`` with 12
throttled PIDs and a bucket that admits the next new PID in 36,000 ms, and ``User:steady``
with none: ``throttled_until(rows, now)`` is ``{"User:crash": 1,036,000}``, and with a hold
of 300,000 ms the actuator acts on ``User:crash`` until 1,336,000 unless a later batch
throttles it again.

Replayed rows (``replay``) and a shadow run act on nothing: the first are history, the
second a trial. Time is wall-clock ms from ``clock``, a parameter (the tests pass theirs).
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from pidquota.actuate.actuator import MOST_CLIENTS, Action, Actuator
from pidquota.actuate.addresses import AddressBook
from pidquota.actuate.controls import (
    AclBinding,
    ClientQuotaKey,
    ClientThrottleKey,
    ControlError,
    Controls,
    ThrottleKey,
    shown_value,
)
from pidquota.actuate.escalation import GRACE_MS, Escalation
from pidquota.actuate.journal import Journal, JournalError, login_principal
from pidquota.actuate.mechanisms import (
    broker_plugin,
    deny_writes,
    quota_and_connections,
    request_quota,
    stricter,
)
from pidquota.actuate.plugin_state import PluginState
from pidquota.actuate.policy import Rails
from pidquota.conf.errors import ConfigError, PidquotaError
from pidquota.conf.settings import principal_list
from pidquota.quota.user_state import UserState, finite

log = logging.getLogger("pidquota.actuate")
CONNECTIONS = "request-quota+connection-rate"  # the mechanism that also acts on addresses
PLUGIN = "broker-plugin"  # the mechanism that writes the broker plug-in's state topic
AUTO = "auto"  # the plug-in where every broker runs it, else CONNECTIONS
STOCK = ("request-quota", CONNECTIONS)  # the mechanisms the closed loop steps up
MAX_COUNTED = 1_000  # client ids counted per principal (a loop can make a new id per producer)


def throttled_until(rows: Iterable[Mapping], window_ms: int, now_ms: int) -> dict[str, int]:
    """Each principal throttled in a batch's metrics ``rows``, with the wall-clock ms its
    throttle ends (see the module docstring); replayed rows are skipped."""
    out: dict[str, int] = {}
    for row in rows:
        if row.get("replay") is True:
            continue
        state = UserState.from_metrics(row, 0, window_ms)
        wait = state.wait_ms if state is not None else 0
        if wait <= 0 and (finite(row.get("throttled")) or 0) <= 0:
            continue
        principal = str(row["principal"])
        out[principal] = max(out.get(principal, 0), now_ms + max(wait, 0))
    return out


PLUGIN_CLASS = "io.pidquota.plugin.PidQuotaAuthorizer"


def chosen(config, controls) -> tuple[str, str]:
    """The mechanism to use and why: the setting's, or for ``auto`` the strongest the cluster
    allows: ``broker-plugin`` when every broker runs pidquota's plug-in (their
    ``authorizer.class.name``), else ``request-quota+connection-rate``."""
    name = config["pidquota.actuator.mechanism"]
    if name != AUTO:
        return name, ""
    if controls is None:
        return CONNECTIONS, "auto; a dry run does not ask the brokers"
    try:
        found = controls.authorizers()
    except ControlError as exc:
        log.warning("actuator: the brokers' authorizer is not known (%s): not the plug-in", exc)
        return CONNECTIONS, "auto; the brokers' authorizer is not known"
    running = sorted(i for i, cls in found.items() if cls == PLUGIN_CLASS)
    if found and len(running) == len(found):
        return PLUGIN, f"auto; every broker ({len(found)}) runs pidquota's plug-in"
    if running:
        return CONNECTIONS, f"auto; only brokers {running} of {sorted(found)} run pidquota's plug-in"
    return CONNECTIONS, "auto; the brokers do not run pidquota's plug-in"


def mechanism_of(config, name: str | None = None):
    """The mechanism ``name`` (by default the one the settings name)."""
    name = name or config["pidquota.actuator.mechanism"]
    if name == "deny-writes":
        return deny_writes()
    if name == PLUGIN:
        return broker_plugin(narrow=config["pidquota.actuator.plugin.narrow"])
    if name == CONNECTIONS:
        rate = config["pidquota.actuator.connection.rate"]
        return quota_and_connections(config["pidquota.actuator.request.percentage"], rate)
    return request_quota(config["pidquota.actuator.request.percentage"])


def rails_of(config) -> Rails:
    allow = frozenset(principal_list(config["pidquota.actuator.allow"]))
    return Rails(config["pidquota.actuator.hold.ms"], config["pidquota.actuator.max.principals"], allow)


def cluster_options(config, fallback: str | None, how: str | None = None) -> dict:
    """The ``kafka.*`` options of the cluster the actuator acts on:
    ``pidquota.actuator.bootstrap``, else ``fallback`` (the run's own cluster); ``how``: the
    fix a missing one's message gives (the run's by default)."""
    from pidquota.store.kafka import security_options, with_ports

    given = config["pidquota.actuator.bootstrap"].strip().removeprefix("kafka://").split("/", 1)[0]
    try:
        bootstrap = with_ports(given) if given else fallback
    except ConfigError as exc:
        raise ConfigError(f"pidquota.actuator.bootstrap: {exc}") from None
    if not bootstrap:
        raise ConfigError(
            "the actuator needs the Kafka cluster it acts on, and none is given: "
            + (
                how
                or "set pidquota.actuator.bootstrap=HOST:PORT, or run with pidquota.actuator=dry-run to "
                "see the actions without a cluster"
            )
        )
    return {"kafka.bootstrap.servers": bootstrap, **security_options(config)}


def measure_grace_ms(config) -> int:
    """How long after a step the closed loop starts counting what the offender still gets: the
    change reaching every broker (``escalation.GRACE_MS``), and an init granted just before it
    reaching a batch: up to a trigger interval waiting for the batch, and about as long again
    in the input (the plug-in's send, Spark's batch). A new user's trial on the plug-in's input
    counted one init granted before a narrowed throttle, 29 s into a measure of W = 1 h, as 123
    new PIDs a window, and widened a throttle that held. Worked example: a trigger every 2 s
    gives 2 + 2 * 2 = 6 s."""
    return GRACE_MS + 2 * config["pidquota.trigger.interval.ms"]


class BatchActuator:
    """The run's actuator: :meth:`start` reconciles the journal, each batch's metrics go to
    :meth:`__call__`, :meth:`stop` lifts what it holds. ``options`` None: a dry run, which reads
    the operator's values from the cluster of ``peek`` (``kafka.*`` options) when given."""

    def __init__(
        self,
        config,
        options: dict | None,
        clock: Callable[[], float] = time.time,
        peek: dict | None = None,
    ):
        self.window_ms = config["producer.id.quota.window.size.seconds"] * 1000
        self.options = options
        self.topic = config["pidquota.actuator.journal.topic"]
        self.clock = clock
        self.counts: Counter = Counter()  # the action rows of this run, by action
        self._skipped: dict[str, str] = {}  # principal -> why, as last said
        controls = journal = None
        if options is not None:
            journal = Journal(options, self.topic, principal=config["pidquota.actuator.principal"])
            # a cluster that does not answer is named within pidquota.kafka.connect.timeout.ms
            controls = Controls(options, connect_timeout_ms=config["pidquota.kafka.connect.timeout.ms"])
        looking = _peek(config, peek) if options is None and peek is not None else None
        self.mechanism, self.why = chosen(config, controls or looking)
        for where, cluster in ((options, controls), (peek, looking)):
            if cluster is not None:  # whatever the mechanism now: the journal may hold plug-in throttles
                cluster.state = PluginState(  # of a past run
                    where,
                    config["pidquota.actuator.plugin.topic"],
                    status_topic=config["pidquota.actuator.plugin.status.topic"],
                )
        self.heartbeat_ms = config["pidquota.actuator.plugin.heartbeat.ms"]
        self.others_may_write = config["pidquota.actuator.plugin.others.may.write"]
        self._busy_since: float | None = None  # when the batch in progress began (monotonic s)
        self.hand_over = config["pidquota.actuator.plugin.hand.over"]
        self.handed: tuple[int, int] | None = None  # at the end: (controls handed over, their last beat's ms)
        self.taken_over = False  # at the end: a lift or another run had claimed the journal
        mechanism = mechanism_of(config, self.mechanism)
        self.actuator = Actuator(mechanism, rails_of(config), controls, journal, clock, peek=looking)
        self.by_address = self.mechanism == CONNECTIONS
        self.book = AddressBook()
        self.loop: Escalation | None = None  # the closed loop (escalation.py), on stock controls
        self.deny = False  # its last step may add deny-writes (asked for, and the cluster allows)
        self.deny_asked = config["pidquota.actuator.escalation.deny.writes"]
        self.low = config["pidquota.actuator.escalation.request.percentage"]
        self.floods: dict[str, Counter] = {}  # principal -> its throttled new PIDs by client id, this step
        self._no_deny: set[str] = set()  # principals the deny-writes step was said to be unsafe for
        # the plug-in refuses only the flooding client ids of a user, when they are known
        self.narrowing = self.mechanism == PLUGIN and config["pidquota.actuator.plugin.narrow"]
        stepped = self.mechanism in STOCK or self.narrowing  # the plug-in's step: the whole user
        low, first = (
            config["pidquota.actuator.escalation.request.percentage"],
            config["pidquota.actuator.request.percentage"],
        )
        if config["pidquota.actuator.escalation"] and self.mechanism in STOCK and low >= first:
            raise ConfigError(
                f"pidquota.actuator.escalation.request.percentage = {low:g} is not below "
                f"pidquota.actuator.request.percentage = {first:g}: the closed loop's step would loosen "
                "the user's quota; set it lower, or pidquota.actuator.escalation=false"
            )
        if config["pidquota.actuator.escalation"] and stepped and not self.dry_run:
            settle = config["pidquota.actuator.escalation.settle.ms"]
            self.loop = Escalation(1, self.window_ms, settle, grace_ms=measure_grace_ms(config))
        self.by_client = self.loop is not None or self.narrowing

    def loop_said(self) -> str:
        """The closed loop in the banner's words ("" for a mechanism it does not step up)."""
        if self.mechanism not in STOCK:
            return ""
        if self.loop is None:
            if self.dry_run:
                return "No closed loop in a dry run (nothing changes, so nothing to measure)"
            return "Closed loop off (pidquota.actuator.escalation=false)"
        last = ", then deny-writes if every broker grants explicitly" if self.deny_asked else ""
        return (
            f"Closed loop: a user still granted over twice its quota is stepped up to request_percentage "
            f"{self.low:g} on its flooding client ids{last}"
        )

    @property
    def dry_run(self) -> bool:
        return self.actuator.dry_run

    @property
    def acted(self) -> dict[str, int]:
        """The principals acted on now, with the wall-clock ms their action ends."""
        return dict(self.actuator.acted)

    def start(self) -> list[Action]:
        """Create the journal topic if missing and reconcile it with the cluster (a restart
        after a crash undoes what expired and keeps what is current)."""
        if self.dry_run:
            return []
        self.actuator.journal.ensure()
        state = self.actuator.controls.state
        if self.mechanism == PLUGIN:  # its topics, and who may write the one the brokers obey:
            state.ensure(self.actuator.journal.principal)  # before the claim, which fences a run
            self._check_writers(state)
        self.actuator.journal.claim()  # one owner: fences an earlier run on this journal, then reads it
        if self.loop is not None and self.deny_asked and self.mechanism in STOCK:
            self.deny = self._deny_allowed()
            self.loop.steps = 2 if self.deny else 1
        rows = self.actuator.reconcile()
        for address, principal in self.actuator.held_addresses().items():
            self.book.own(address, principal)  # a restart knows the addresses it holds again
        if self.mechanism == PLUGIN:  # after the reconcile: the brokers obey what it left
            state.start_heartbeat(self.heartbeat_ms, alive=self._not_hung)
            state.watch_brokers()
        return self._said(rows)

    def batch_begins(self) -> None:
        """A batch's output has begun (the sink): while one runs over half the heartbeat's
        bound, no heartbeat is written, so a hung run is not obeyed for long."""
        self._busy_since = time.monotonic()

    def batch_ends(self) -> None:
        self._busy_since = None

    def _not_hung(self) -> bool:
        since = self._busy_since
        return since is None or time.monotonic() - since < self.heartbeat_ms / 2000

    def obedience(self) -> list:
        """Each broker's verdict on the plug-in state (``actuate/obedience.py``), newest; empty
        when the mechanism is not the plug-in, or before its first heartbeat."""
        state = self.actuator.controls.state if self.actuator.controls is not None else None
        watch = getattr(state, "watch", None)
        return watch.verdicts() if watch is not None else []

    def _check_writers(self, state: PluginState) -> None:
        """At every start: who besides pidquota may write the state topic, which decides whom
        every broker refuses. Refused (a ConfigError naming each ACL) unless the operator allows
        it, then said as a warning."""
        own = self.actuator.journal.principal
        try:
            others = state.others_who_may_write(self.actuator.controls, own)
        except ControlError as exc:
            others = [f"not known ({exc}; pidquota's principal needs DESCRIBE on the cluster to read ACLs)"]
        if not others:
            return
        said = "; ".join(others)
        if self.others_may_write:
            log.warning(
                "actuator: the plug-in's state topic %r may be written by others than pidquota (%s): %s "
                "(pidquota.actuator.plugin.others.may.write=true)",
                state.topic,
                own or "pidquota's principal not known",
                said,
            )
            return
        login = login_principal(self.options or {})
        mine = re.compile(rf"for {re.escape(login)}( from |$)") if login else None  # AclBinding.name's end
        if own and mine and login != own and any(mine.search(o) for o in others):  # the run is the other
            fix = f"this run logs in as {login}, not {own}: set pidquota.actuator.principal={login}, or log in as {own}"
        elif own:
            fix = "remove those ACLs (kafka-acls.sh --remove)"
        else:
            fix = (
                "set pidquota.actuator.principal=User:NAME, pidquota's own (User:ANONYMOUS on a PLAINTEXT "
                "listener), and pidquota gives the topic ACLs for it alone"
            )
        raise ConfigError(
            f"the plug-in's state topic {state.topic!r} may be written by others than pidquota "
            f"({own or 'whose principal is not known'}): {said}. Whoever writes it decides whom every broker "
            f"refuses: {fix}; or set pidquota.actuator.plugin.others.may.write=true to act through it anyway"
        )

    def _deny_allowed(self) -> bool:
        """Whether the closed loop's last step may add deny-writes' ACLs: only where every
        broker grants explicitly (a DENY on every topic would close them to every user
        elsewhere); said once when not."""
        try:
            ok, why = self.actuator.controls.grants_explicitly()
        except ControlError as exc:
            ok, why = False, str(exc)
        if not ok:
            log.warning(
                "actuator: the closed loop will not use deny-writes (pidquota.actuator.escalation.deny."
                "writes=true): %s, where a DENY on every topic closes them to every user",
                why,
            )
        else:
            log.info("actuator: the closed loop may deny writes: %s", why)
        return ok

    def __call__(
        self,
        metrics_rows: Iterable[Mapping],
        addresses: Iterable[tuple[str, str | None, bool]] = (),
        clients: Iterable[tuple[str, str | None, int]] = (),
    ) -> list[Action]:
        """One batch: its metrics rows that may be throttled (and those of the principals acted
        on), its decisions' ``(principal, client address, throttled)`` (:class:`AddressBook`),
        and its throttled decisions counted by ``(principal, client id)`` (the closed loop's
        flooding client ids)."""
        now = int(self.clock() * 1000)
        metrics_rows = list(metrics_rows)
        throttled = throttled_until(metrics_rows, self.window_ms, now)
        for principal in set(self.floods) - set(throttled) - set(self.actuator.acted):
            del self.floods[principal]  # neither throttled nor acted on now: nothing to narrow
        for principal, client, count in clients:  # each throttled principal's flooding client ids
            if client and (principal in throttled or principal in self.actuator.acted):
                self.floods.setdefault(principal, Counter())[client] += int(count)
        for principal, counts in self.floods.items():  # a loop of a new id per producer: bounded
            if len(counts) > MAX_COUNTED:
                self.floods[principal] = Counter(dict(counts.most_common(MAX_COUNTED // 2)))
        if self.narrowing:
            narrow = {p: self._flooding(p) for p in throttled if p not in self.actuator.acted}
            rows = self.actuator(throttled, clients=narrow)
        elif not self.by_address:
            rows = self.actuator(throttled)
        else:
            held = self.actuator.held_addresses()
            self.book.held = set(held)
            self.book.add(addresses)
            shared = {a for a in held if self.book.shared(a)}  # new, or an undo that failed before
            mine = {p: self.book.exclusive(p) for p in throttled}
            rows = self.actuator(throttled, mine, shared)
        if self.loop is not None:
            rows += self._escalate(metrics_rows, clients, now)
        return self._said(rows)

    def _escalate(self, metrics_rows: list[Mapping], clients, now: int) -> list[Action]:
        """The closed loop's batch: what each principal acted on was granted, and its step moved
        where the measure says (``escalation.py``)."""
        acted = self.actuator.acted
        for principal in set(self.loop.at) - set(acted):
            self.loop.forget(principal)
            self.floods.pop(principal, None)
            self._no_deny.discard(principal)
        for principal in acted:
            self.loop.seed(principal, _level(self.actuator.extra.get(principal, [])), now)
        for row in metrics_rows:
            principal = str(row.get("principal"))
            if row.get("replay") is not True and principal in acted:
                new = (finite(row.get("admitted")) or 0) + (finite(row.get("throttled")) or 0)
                self.loop.observe(principal, int(new), finite(row.get("quota")), now)
        rows = []
        for principal in sorted(p for p, until in acted.items() if until > now):  # not one being let go
            before = self.loop.level(principal)
            verdict = self.loop.judge(principal, now)
            if verdict is None:
                continue
            if self.narrowing:  # the plug-in's one step: the whole user
                if verdict.widen:
                    continue
                extra = [(ThrottleKey(principal), True)] if verdict.level else []
                note = f"closed loop: step {verdict.level} of 1, the whole user ({verdict.reason})"
                rows += self.actuator.relevel(principal, extra, note)
                continue
            clients = self._clients_of(principal, down=verdict.level < before)
            extra = stricter(
                principal, verdict.level, clients, self.low, self._may_deny(principal, verdict.level)
            )
            if verdict.widen and set(extra) == set(self.actuator.extra.get(principal, [])):
                continue
            what = "widened" if verdict.widen else f"step {verdict.level} of {self.loop.steps}"
            note = f"closed loop: {what} ({verdict.reason})"
            rows += self.actuator.relevel(principal, extra, note)
            self.floods.pop(principal, None)  # the next step's clients are counted anew
        return rows

    def _clients_of(self, principal: str, down: bool) -> tuple[str, ...]:
        """The client ids of a principal's next step: those that flood now for its first step;
        then the ones it has, and, going up or widening, those that flood now as well (``()``,
        the user's ``<default>`` client, once unknown or too many)."""
        had = self.actuator.extra.get(principal, [])
        named = {c.client_id for c, _ in had if isinstance(c, ClientQuotaKey)}
        if not named:
            return self._flooding(principal)
        if None in named:
            return ()
        return tuple(sorted(named)) if down else _at_most(named | set(self._flooding(principal)))

    def _may_deny(self, principal: str, level: int) -> bool:
        """Whether the deny-writes step may be taken for ``principal`` now: allowed at start,
        and an ALLOW ACL names it (a user that writes without one shows a cluster that lets
        everyone write resources without ACLs, where a DENY on every topic would close them to
        every user); said once per principal when not."""
        if not self.deny or level < 2:
            return False
        try:
            if self.actuator.controls.allows(principal):
                return True
            why = "no ALLOW ACL names it, so this cluster lets users write without one"
        except ControlError as exc:
            why = str(exc)
        if principal not in self._no_deny:
            self._no_deny.add(principal)
            log.warning("actuator: the closed loop does not deny writes to %s: %s", principal, why)
        return False

    def _flooding(self, principal: str) -> tuple[str, ...]:
        """The client ids that make most (80%) of the principal's throttled new PIDs this step;
        none (the user's ``<default>`` client) when not known or spread over more than
        ``MOST_CLIENTS``."""
        counts = self.floods.get(principal)
        if not counts:
            return ()
        total, picked, covered = sum(counts.values()), [], 0
        for client, count in counts.most_common():
            picked.append(client)
            covered += count
            if covered >= 0.8 * total:
                break
        return _at_most(picked)

    def stop(self) -> list[Action]:
        """Undo everything held (the run's end; a kill leaves it to the next start); through the
        plug-in, with ``pidquota.actuator.plugin.hand.over``, leave it to the next run instead
        (:meth:`left_behind` says so)."""
        if self._handing_over():
            return []
        try:
            rows = self.actuator.lift_all()
        except (ControlError, JournalError) as exc:
            log.warning(
                "actuator: not lifted at the end (the next start or `pidquota actuator lift` will): %s", exc
            )
            return []
        return self._said(rows)

    def _said(self, rows: list[Action]) -> list[Action]:
        """``rows`` less the skips already said (a capped principal is skipped at every batch
        until there is room; one row says it), counted and logged."""
        skipped = {r.principal: r.note for r in rows if r.action == "skipped"}
        rows = [r for r in rows if r.action != "skipped" or self._skipped.get(r.principal) != r.note]
        self._skipped = skipped
        for row in rows:
            self.counts[row.action] += 1
            if row.action in ("apply", "undo", "left"):
                log.info("actuator: %s", describe(row))
        return rows

    def _handing_over(self) -> bool:
        """At the end, through the plug-in: stop the heartbeat and leave the throttles for the
        next run (True), when the setting says so and there are some."""
        state = None if self.dry_run else self.actuator.controls.state
        held = 0 if self.dry_run else len(self.actuator.entries)
        if self.mechanism != PLUGIN or not self.hand_over or not held or self.actuator.fenced is not None:
            return False
        if not all(isinstance(c, ThrottleKey | ClientThrottleKey) for c in self.actuator.entries):
            return False  # another mechanism's controls, kept from an earlier run: lifted as ever
        state.stop_heartbeat()
        if not self.actuator.journal.still_mine():  # a lift (or another run) took them over: theirs
            self.handed, self.taken_over = None, True
            return True
        last = state.last_beat_ms if state.last_beat_ms is not None else int(self.clock() * 1000)
        self.handed = (held, last)
        return True

    def left_behind(self) -> str:
        """What this run still holds on the cluster, and how to lift it; empty when nothing
        (said when a run stops without lifting: a second signal, a lift that failed, or plug-in
        throttles handed over to the next run)."""
        held = 0 if self.dry_run else len(self.actuator.entries)
        if (
            not held or self.actuator.fenced is not None or self.taken_over
        ):  # the journal's new owner holds them
            return ""
        where = self.options["kafka.bootstrap.servers"]
        if self.handed is not None:
            ends = _utc(self.handed[1] + self.heartbeat_ms)
            return (
                f"{held} plug-in throttle(s) handed over to the next run on {where} (journal topic "
                f"{self.topic}): the brokers obey them until {ends}, when the last heartbeat is "
                f"{self.heartbeat_ms / 1000:g} s old, and a run started before then keeps them without "
                f"a gap; `pidquota actuator lift --bootstrap {where}` ends them now"
            )
        return (
            f"{held} control(s) stay held on {where} (journal topic {self.topic}): `pidquota actuator "
            f"lift` with this run's settings (--bootstrap {where}) undoes them now; else the next run "
            "does at its start"
        )

    def summary(self) -> str:
        """The run's actions in one phrase, e.g. ``2 applied, 2 undone``."""
        order = ("apply", "extend", "undo", "keep", "left", "skipped", "failed")
        words = {"apply": "applied", "undo": "undone", "extend": "extended", "keep": "kept"}
        shown = [f"{self.counts[a]} {words.get(a, a)}" for a in order if self.counts[a]]
        return ", ".join(shown) or "nothing to do"

    def close(self) -> None:
        for cluster in (self.actuator.controls, self.actuator.peek):
            if cluster is not None:
                cluster.close()
        if self.actuator.journal is not None:
            self.actuator.journal.close()


def _at_most(clients) -> tuple[str, ...]:
    """``clients``, sorted; none (the user's ``<default>`` client) when over ``MOST_CLIENTS``."""
    return tuple(sorted(clients)) if len(clients) <= MOST_CLIENTS else ()


def _level(extra) -> int:
    """The closed loop's step that a principal's extra controls show (a restart's)."""
    if any(isinstance(c, AclBinding) for c, _ in extra):
        return 2
    return 1 if extra else 0


def _peek(config, options: dict):
    """A dry run's read-only look at the cluster, or None (with a warning) when it does not answer."""
    try:
        return Controls(options, connect_timeout_ms=config["pidquota.kafka.connect.timeout.ms"])
    except PidquotaError as exc:
        log.warning("actuator: DRY RUN without the operator's values: %s", exc)
        return None


def describe(row: Action) -> str:
    """One action as a line: ``apply quota user=crash request_percentage: absent -> 1.0 until
    2026-11-26T23:40:00Z (User:crash)``."""
    dry = "would " if row.dry_run else ""
    change = (
        f": {shown_value(row.before)} -> {shown_value(row.value)}"
        if row.action in ("apply", "undo", "left")
        else ""
    )
    until = f" until {_utc(row.until_ms)}" if row.until_ms else ""
    note = f" ({row.note})" if row.note else ""
    return f"{dry}{row.action} {row.control}{change}{until} for {row.principal}{note}"


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))
