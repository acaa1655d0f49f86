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

Worked example: acting on ``User:crash`` at t writes ``t:User:crash = t + 86400000``; the run's
heartbeat thread writes ``h = "NOW 60000"`` every 15 s; the undo writes the tombstone of
``t:User:crash``, and every broker serves its InitProducerId again within a second.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from pidquota.actuate.controls import ControlError
from pidquota.actuate.journal import ensure_compacted, topic_bindings
from pidquota.actuate.mechanisms import utf16_length
from pidquota.conf.errors import PidquotaError
from pidquota.store import kafka as kafka_store

log = logging.getLogger("pidquota.actuate")

THROTTLE, CLIENT, HEARTBEAT = "t:", "c:", "h"


def throttle_key(principal: str, client_id: str | None = None) -> bytes:
    """The state topic's key of a principal's throttle, or of one client id's of it."""
    if client_id is None:
        return f"{THROTTLE}{principal}".encode()
    return f"{CLIENT}{utf16_length(client_id)}:{client_id}{principal}".encode()


CAP_MS = 24 * 3600 * 1000


class PluginState:
    """The state topic: :meth:`read` a principal's entry, :meth:`write` it (None: the
    tombstone), :meth:`beat` the heartbeat, and a thread that beats while a run acts."""

    def __init__(self, options: dict, topic: str, timeout_ms: int = 30_000, clock=time.time):
        self.options, self.topic, self.timeout_ms, self.clock = options, topic, timeout_ms, clock
        self._producer = None
        self._beating: threading.Event | None = None

    def ensure(self, principal: str) -> None:
        """Create the topic (compacted) unless it exists; at creation, ACLs for pidquota's
        ``principal`` alone: who may write it decides whom every broker refuses."""
        guard = topic_bindings(principal, self.topic) if principal else []
        ensure_compacted(self.options, self.topic, self.timeout_ms, guard, "the plug-in's state topic")

    def others_who_may_write(self, controls, own: str) -> list[str]:
        """Who besides pidquota's principal ``own`` may write the topic, a phrase each: every
        ALLOW ACL of WRITE or ALL that matches it (literal, prefixed, wildcard; a wildcard
        principal too), and, where no ACL names it at all, every principal when the brokers
        allow everyone where no ACL is found. A DENY is not weighed: the check errs on the side
        of saying. ``own`` empty (pidquota's principal not known): every writer is another."""
        writers = controls.topic_writers(self.topic)
        others = [b.name for b in writers if not own or b.principal != own]
        if not writers:
            explicit, why = controls.grants_explicitly()
            if not explicit:
                others.append(f"every principal: no ACL lets anyone write it, and {why}")
        return others

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
        self._send(HEARTBEAT.encode(), f"{int(self.clock() * 1000)} {max_age_ms}".encode())

    def start_heartbeat(self, max_age_ms: int) -> None:
        """Beat now and every quarter of ``max_age_ms`` on a daemon thread, until :meth:`close`: a
        beat that fails is said once and tried again; the plug-in fails open if none lands."""
        self.beat(max_age_ms)
        stop = self._beating = threading.Event()

        def loop() -> None:
            failing = False
            while not stop.wait(max_age_ms / 4000):
                try:
                    self.beat(max_age_ms)
                    failing = False
                except ControlError as exc:
                    if not failing:
                        log.warning("pidquota: the plug-in's heartbeat failed (tried again): %s", exc)
                    failing = True

        threading.Thread(target=loop, name="pidquota-plugin-heartbeat", daemon=True).start()

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
        if self._beating is not None:
            self._beating.set()
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.close(timeout=5)
            self._producer = None
