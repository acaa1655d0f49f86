"""The broker plug-in's state topic, as pidquota writes it (``plugin/``, docs/broker-plugin.md):
one partition, compacted; ``t:User:NAME`` = the end of its throttle (wall-clock ms), a
tombstone to end it; ``c:N:CLIENTUser:NAME`` the same for one client id of it (N the id's
length in UTF-16 code units, as Java counts it: any id reads unambiguously), the narrowed
throttle; ``h`` = ``AT_MS MAX_AGE_MS``, the heartbeat without which every broker's
plug-in refuses nothing (fail open).

The actuator's ``broker-plugin`` mechanism holds one control per principal,
:class:`pidquota.actuate.controls.ThrottleKey`, present or absent like an ACL, journalled and
undone (a tombstone) as every other control. Its record's end is ``CAP_MS`` ahead: the
actuator's undo ends the throttle, and the cap bounds a throttle whose undo never came while
something still heartbeats.

Each broker's plug-in reports whether it obeys to a second topic, the status topic
(``pidquota-plugin-status``, compacted, keyed ``broker:ID``): :class:`StatusWatch` follows it
while a run acts, and says each broker's verdict when it changes (``obedience.py``).

Worked example: acting on ``User:crash`` at t writes ``t:User:crash = t + 86400000``; the run's
heartbeat thread writes ``h = "NOW 60000"`` every 15 s while no batch has been running for
more than half of that bound (a hung run stops beating, and the brokers stop obeying); the undo
writes the tombstone of ``t:User:crash``, and every broker serves its InitProducerId again
within a second.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from pidquota.actuate.controls import ControlError
from pidquota.actuate.journal import ensure_compacted, guard_new_topic, topic_bindings
from pidquota.actuate.mechanisms import utf16_length
from pidquota.actuate.obedience import Report, Verdict, said, verdicts
from pidquota.conf.errors import PidquotaError
from pidquota.store import kafka as kafka_store

log = logging.getLogger("pidquota.actuate")
# each broker's verdict as it changes: the run's own lines, good news included (cli/logs.py)
brokers_log = logging.getLogger("pidquota.actuate.brokers")

THROTTLE, CLIENT, HEARTBEAT = "t:", "c:", "h"
STATUS_TOPIC = "pidquota-plugin-status"  # the plug-in's own default (pidquota.plugin.status.topic)


def throttle_key(principal: str, client_id: str | None = None) -> bytes:
    """The state topic's key of a principal's throttle, or of one client id's of it."""
    if client_id is None:
        return f"{THROTTLE}{principal}".encode()
    return f"{CLIENT}{utf16_length(client_id)}:{client_id}{principal}".encode()


CAP_MS = 24 * 3600 * 1000


class PluginState:
    """The state topic: :meth:`read` a principal's entry, :meth:`write` it (None: the
    tombstone), :meth:`beat` the heartbeat, and a thread that beats while a run acts."""

    def __init__(
        self,
        options: dict,
        topic: str,
        timeout_ms: int = 30_000,
        clock=time.time,
        status_topic: str = STATUS_TOPIC,
    ):
        self.options, self.topic, self.timeout_ms, self.clock = options, topic, timeout_ms, clock
        self.status_topic = status_topic
        self._producer = None
        self._beating: threading.Event | None = None
        self.first_beat_ms: int | None = None  # this run's first heartbeat that landed
        self.last_beat_ms: int | None = None
        self.watch: StatusWatch | None = None

    def ensure(self, principal: str) -> None:
        """Create the topic (compacted) unless it exists; at creation, ACLs for pidquota's
        ``principal`` alone: who may write it decides whom every broker refuses. The status
        topic too, where the brokers' plug-ins write (their principal needs WRITE on it: a
        super user, the brokers' own, has it)."""
        guard = topic_bindings(principal, self.topic) if principal else []
        ensure_compacted(self.options, self.topic, self.timeout_ms, guard, "the plug-in's state topic")
        readers = [b for b in topic_bindings(principal, self.status_topic) if b.operation != "WRITE"]
        try:  # what the brokers report is for the operator's eyes: a fault here does not stop the run
            what = "the plug-in's status topic"
            ensure_compacted(
                self.options, self.status_topic, self.timeout_ms, readers if principal else [], what
            )
        except PidquotaError as exc:
            log.warning(
                "pidquota: the plug-in's status topic %r: %s; whether each broker obeys will not be known",
                self.status_topic,
                exc,
            )

    def others_who_may_write(self, controls, own: str) -> list[str]:
        """Who besides pidquota's principal ``own`` may write the topic, a phrase each: every
        ALLOW ACL of WRITE or ALL that matches it (literal, prefixed, wildcard; a wildcard
        principal too), and, where no ACL lets anyone write it, every principal unless every
        broker shows ``allow.everyone.if.no.acl.found=false`` (Kafka mostly hides that setting,
        and hidden is not known). A topic no ACL guards is first guarded, when ``own`` is known
        (an existing topic got no ACLs before). A DENY is not weighed: the check errs on the side
        of saying. ``own`` empty (pidquota's principal not known): every writer is another."""
        writers = controls.topic_writers(self.topic)
        if not writers and own:
            self._guard(controls, own)
            writers = controls.topic_writers(self.topic)
        others = [b.name for b in writers if not own or b.principal != own]
        if not writers:
            found = controls.broker_configs("allow.everyone.if.no.acl.found")
            if not found or any(
                c["allow.everyone.if.no.acl.found"].lower() != "false" for c in found.values()
            ):
                others.append(
                    "every principal: no ACL lets anyone write it, and the brokers do not show "
                    "allow.everyone.if.no.acl.found=false"
                )
        return others

    def _guard(self, controls, own: str) -> None:
        """ACLs for pidquota's principal alone on a state topic that has none (as at creation)."""
        try:
            for binding in topic_bindings(own, self.topic):
                controls.write(binding, True)
        except ControlError as exc:  # no ALTER on the cluster: the check says who may write
            log.warning("pidquota: the plug-in's state topic %r got no ACLs: %s", self.topic, exc)
            return
        log.info(
            "pidquota: the plug-in's state topic %r had no ACL: now written by %s alone", self.topic, own
        )

    def read(self, principal: str, client_id: str | None = None) -> bool:
        """Whether the principal's throttle (or its client id's) is in the topic now (its newest
        record, not a tombstone, and not ended)."""
        value = self._latest().get(throttle_key(principal, client_id))
        if value is None:
            return False
        try:
            return int(value.decode()) > self.clock() * 1000
        except (UnicodeDecodeError, ValueError):
            return False  # not pidquota's: the plug-in skips it too

    def write(self, principal: str, present: bool, client_id: str | None = None) -> None:
        end = str(int(self.clock() * 1000) + CAP_MS).encode() if present else None
        self._send(throttle_key(principal, client_id), end)

    def beat(self, max_age_ms: int) -> None:
        at = int(self.clock() * 1000)
        self._send(HEARTBEAT.encode(), f"{at} {max_age_ms}".encode())
        if self.first_beat_ms is None:
            self.first_beat_ms = at
        self.last_beat_ms = at

    def start_heartbeat(self, max_age_ms: int, alive: Callable[[], bool] = lambda: True) -> None:
        """Beat now and every quarter of ``max_age_ms`` on a daemon thread while ``alive()`` (the
        run's batches are not hung), until :meth:`close`: a beat that fails is said once and
        tried again; the plug-in fails open if none lands within ``max_age_ms``."""
        self.beat(max_age_ms)
        stop = self._beating = threading.Event()

        def loop() -> None:
            failing = hung = False
            while not stop.wait(max_age_ms / 4000):
                if not alive():
                    if not hung:
                        log.warning(
                            "pidquota: a batch has run for over half the heartbeat's bound (%g s): no "
                            "heartbeat until it ends, so the brokers stop obeying within the bound",
                            max_age_ms / 1000,
                        )
                    hung = True
                    continue
                hung = False
                try:
                    self.beat(max_age_ms)
                    failing = False
                except ControlError as exc:
                    if not failing:
                        log.warning("pidquota: the plug-in's heartbeat failed (tried again): %s", exc)
                    failing = True

        threading.Thread(target=loop, name="pidquota-plugin-heartbeat", daemon=True).start()

    def stop_heartbeat(self) -> None:
        """No more beats: the brokers obey the set until the last one is over its bound."""
        if self._beating is not None:
            self._beating.set()

    def heartbeat(self) -> tuple[int, int] | None:
        """The heartbeat in the topic now, ``(at_ms, max_age_ms)``, or None (none, or not
        pidquota's)."""
        value = self._latest().get(HEARTBEAT.encode())
        try:
            at, age = value.decode().split(" ") if value else ("", "")
            return int(at), int(age)
        except (UnicodeDecodeError, ValueError):
            return None

    def reports(self) -> dict[int, Report]:
        """Each broker's newest report in the status topic (``pidquota actuator status``)."""
        try:
            records = kafka_store.read_to_end(self.options, self.status_topic, self.timeout_ms)
        except PidquotaError as exc:
            raise ControlError(
                f"cannot read the plug-in's status topic {self.status_topic!r}: {exc}"
            ) from None
        out: dict[int, Report] = {}
        for r in records:
            keep_newest(out, Report.parse(r.key, r.value))
        return out

    def watch_brokers(self) -> StatusWatch:
        """Follow the status topic on a daemon thread, saying each broker's verdict as it
        changes (:class:`StatusWatch`), until :meth:`close`."""
        self.watch = StatusWatch(self)
        self.watch.start()
        return self.watch

    def _latest(self) -> dict[bytes, bytes | None]:
        """Every key's newest value, read to the end of the topic (all of it, or a
        ControlError: a partial read would show a throttle as gone, and its undo would end the
        journal's record while the throttle stayed in the topic)."""
        try:
            records = kafka_store.read_to_end(self.options, self.topic, self.timeout_ms)
        except PidquotaError as exc:
            raise ControlError(f"cannot read the plug-in's state topic {self.topic!r}: {exc}") from None
        return {r.key: r.value for r in records if r.key is not None}

    def _send(self, key: bytes, value: bytes | None) -> None:
        try:
            if self._producer is None:
                self._producer = kafka_store.producer(self.options, request_timeout_ms=self.timeout_ms)
            self._producer.send(self.topic, key=key, value=value).get(timeout=self.timeout_ms / 1000)
        except Exception as exc:  # kafka-python raises several kinds here
            raise ControlError(f"cannot write the plug-in's state topic {self.topic!r}: {exc}") from None

    def close(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        if self._beating is not None:
            self._beating.set()
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.close(timeout=5)
            self._producer = None


INITS_TOPIC = "pidquota-plugin-inits"  # the plug-in's own default (pidquota.plugin.inits.topic)


def ensure_inits_topic(options: dict, topic: str, timeout_ms: int, principal: str) -> bool:
    """Make the plug-in's inits topic unless it exists (True: made), where every broker's plug-in
    publishes the InitProducerIds it answers and pidquota reads them (``--input-format
    plugin-inits``). Not compacted (each record is one init), a partition per broker and at least
    3, replicated up to 3, kept Kafka's default week. At its creation, ACLs for pidquota's
    ``principal`` to read it; none to write it: the plug-ins' clients write it as super users
    (or their principal is granted DESCRIBE and WRITE), and anyone else who may could have
    pidquota throttle any user. The plug-ins see it at their next check, within 10 s."""
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = kafka_store.admin(options, request_timeout_ms=timeout_ms, bootstrap_timeout_ms=timeout_ms)
    try:
        if topic in admin.list_topics():
            return False
        brokers = len(admin.describe_cluster().get("brokers", [])) or 1
        made = NewTopic(topic, max(3, brokers), min(3, brokers), topic_configs={"cleanup.policy": "delete"})
        try:
            admin.create_topics([made])
        except TopicAlreadyExistsError:
            return False
    except Exception as exc:  # kafka-python raises several kinds here
        from kafka.errors import KafkaConnectionError, KafkaTimeoutError, NoBrokersAvailable

        if isinstance(exc, (NoBrokersAvailable, KafkaConnectionError, KafkaTimeoutError)):
            raise ControlError(
                f"Kafka at {options['kafka.bootstrap.servers']} does not answer within {timeout_ms / 1000:g} s "
                f"({type(exc).__name__}): is the address right, and are pidquota.kafka.* its security settings?"
            ) from None
        raise ControlError(
            f"cannot create the plug-in's inits topic {topic!r}: {type(exc).__name__}: {exc}; pidquota's "
            "principal needs CREATE on the cluster and DESCRIBE on the topic (or create it yourself, any "
            "number of partitions)"
        ) from None
    finally:
        admin.close()
    readers = [b for b in topic_bindings(principal, topic) if b.operation in ("DESCRIBE", "READ")]
    guard_new_topic(options, topic, timeout_ms, readers if principal else [], "the plug-in's inits topic")
    return True


RECENT_MS = 3_600_000  # the default inits topic written within it: brokers still publish there


def misnamed_inits_topic(options: dict, topic: str, timeout_ms: int, now_ms: int) -> str | None:
    """Why ``topic`` is likely not the one the brokers' plug-ins publish to, or None. A run
    that reads a misspelled name made it, empty, and read nothing while a flood went through
    (a new user's trial). So: a name other than the plug-in's default that is missing or
    empty, where the default's topic got records in the last hour (``RECENT_MS``: brokers that
    moved to another name leave the default quiet), is a mistake. A guess: a cluster that does
    not answer gives None (the start-up's own checks say so). Worked example:
    ``pidquota-plugin-init`` missing, ``pidquota-plugin-inits`` written a minute ago and holding
    350 records: the answer names both."""
    if topic == INITS_TOPIC:
        return None
    from kafka import TopicPartition

    def records(c, name: str) -> tuple[int, bool]:
        """How many records ``name`` holds (-1: no such topic), and whether any is recent."""
        parts = [TopicPartition(name, p) for p in c.partitions_for_topic(name) or ()]
        if not parts:
            return -1, False
        ends, begins = c.end_offsets(parts), c.beginning_offsets(parts)
        recent = c.offsets_for_times({tp: now_ms - RECENT_MS for tp in parts})
        return sum(ends[tp] - begins[tp] for tp in parts), any(v is not None for v in recent.values())

    try:
        c = kafka_store.consumer(options, request_timeout_ms=timeout_ms, bootstrap_timeout_ms=timeout_ms)
        try:
            (default, recent), (given, _) = records(c, INITS_TOPIC), records(c, topic)
        finally:
            c.close()
    except Exception:  # kafka-python raises several kinds; the checks that follow name the fault
        return None
    if default <= 0 or not recent or given > 0:
        return None
    return (
        f"the input topic {topic!r} {'does not exist' if given < 0 else 'is empty'}, and the plug-in's "
        f"default inits topic {INITS_TOPIC!r} holds {default:,} records: is it misspelled? Give "
        f"kafka://HOST:PORT/{INITS_TOPIC}; if the brokers' pidquota.plugin.inits.topic does say {topic}, "
        f"delete the topic {INITS_TOPIC!r} they no longer write"
    )


def inits_writers(controls, topic: str, own: str, brokers: str = "") -> list[str]:
    """Who besides the brokers may write the plug-in's inits topic, a phrase each: whoever may
    can have pidquota throttle any user, with inits made up in that user's name. The brokers
    write it as super users, no ACL needed; every ALLOW ACL of WRITE or ALL that matches the
    topic (literal, prefixed, wildcard) lets someone else. Where no ACL matches it at all,
    ``allow.everyone.if.no.acl.found`` decides: every principal may, unless every broker shows
    it false. Such a topic is first given pidquota's ``own`` read ACLs, as at its creation:
    any ACL on a topic closes it to all but super users and whom the ACLs name. Worked
    example: ACLs ``ALLOW READ User:pidquota`` and ``ALLOW WRITE User:app-*`` (prefixed) give
    one phrase, the second's; no ACL and the brokers' default (true) give "every principal
    ...". pidquota's own principal ``own`` is not another, nor is ``brokers``, the principal the
    plug-in writes as when it is not a super user (``pidquota.actuator.plugin.brokers.principal``).
    An existing topic's ACLs are never changed here: an ACL added would close it to a plug-in
    principal that writes it where the brokers allow everyone."""
    acls = controls.topic_acls(topic)
    ours = {p for p in (own, brokers) if p}
    if acls:
        return [
            b.name
            for b in acls
            if b.permission == "ALLOW" and b.operation in ("WRITE", "ALL") and b.principal not in ours
        ]
    found = controls.broker_configs("allow.everyone.if.no.acl.found")
    if found and all(c["allow.everyone.if.no.acl.found"].lower() == "false" for c in found.values()):
        return []
    return [
        "every principal: no ACL matches the topic, and the brokers do not show "
        "allow.everyone.if.no.acl.found=false"
    ]


def keep_newest(reports: dict[int, Report], report: Report | None) -> None:
    """``report`` in ``reports`` unless it is none, or older than the one held for its broker."""
    held = reports.get(report.broker) if report is not None else None
    if report is not None and (held is None or report.at_ms >= held.at_ms):
        reports[report.broker] = report


class StatusWatch:
    """The brokers' reports, followed on a daemon thread (a consumer of the status topic from
    its start, polled every second; the cluster's broker ids asked every 30 s), and their
    verdicts: each change said once in the run's log (a warning for a broker that does not
    obey, a line when it obeys again). :meth:`verdicts` is the newest (Prometheus, the end)."""

    POLL_S, BROKERS_EVERY_S = 1.0, 30.0

    def __init__(self, state: PluginState):
        self.state = state
        self._admin = None
        self.reports: dict[int, Report] = {}
        self._ids: list[int] = []
        self._said: dict[int, bool | None] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="pidquota-plugin-status", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def verdicts(self) -> list[Verdict]:
        with self._lock:
            reports, ids = dict(self.reports), list(self._ids)
        return verdicts(reports, ids, self.state.first_beat_ms, int(self.state.clock() * 1000))

    def _run(self) -> None:
        failing, asked = False, 0.0
        while not self._stop.is_set():
            try:
                reader = kafka_store.consumer(self.state.options, request_timeout_ms=self.state.timeout_ms)
                try:
                    from kafka import TopicPartition

                    part = TopicPartition(self.state.status_topic, 0)
                    reader.assign([part])
                    reader.seek_to_beginning(part)
                    while not self._stop.is_set():
                        if time.monotonic() - asked > self.BROKERS_EVERY_S:
                            self._ids, asked = self._brokers(), time.monotonic()
                        for batch in reader.poll(timeout_ms=int(self.POLL_S * 1000)).values():
                            self._read(batch)
                        self._judge()
                        failing = False
                finally:
                    reader.close()
            except Exception as exc:  # kafka-python raises several kinds; the run goes on
                if not failing:
                    log.warning("pidquota: cannot follow the plug-in's status topic (tried again): %s", exc)
                failing = True
                self._stop.wait(5)
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()

    def _brokers(self) -> list[int]:
        """The cluster's broker ids now (the last known, if it does not answer)."""
        try:
            if self._admin is None:
                self._admin = kafka_store.admin(self.state.options, request_timeout_ms=self.state.timeout_ms)
            return sorted(int(b["broker_id"]) for b in self._admin.describe_cluster().get("brokers", []))
        except Exception as exc:  # kafka-python raises several kinds here
            log.debug("pidquota: the cluster's brokers not known now: %s", exc)
            return self._ids

    def _read(self, records) -> None:
        """The newest report of each broker: one older than the one held (a re-read from the
        topic's start, before compaction) does not replace it."""
        with self._lock:
            for r in records:
                keep_newest(self.reports, Report.parse(r.key, r.value))

    def _judge(self) -> None:
        for verdict in self.verdicts():
            if verdict.obeys is None or self._said.get(verdict.broker) == verdict.obeys:
                continue
            if verdict.obeys:
                brokers_log.info("actuator: %s", said(verdict))
            else:
                brokers_log.warning("actuator: %s", said(verdict))
            self._said[verdict.broker] = verdict.obeys
