"""The mechanisms: which of Kafka's controls the actuator sets for a principal.

* ``request-quota``: the user's ``request_percentage`` client quota (KIP-546), at
  ``pidquota.actuator.request.percentage``. Kafka delays the responses of a user over it,
  InitProducerId's included, and mutes its connection; it grants the PID first.
* ``request-quota+connection-rate``: the same quota, and on each client address the
  principal has to itself (``AddressBook``: no other principal's decision came from it),
  the IP entity's ``connection_creation_rate`` (KIP-612) at
  ``pidquota.actuator.connection.rate``. Kafka closes a new connection over the rate after
  the throttle delay, and a crash loop needs a new connection for each restart; the
  connections already open are not touched.
* ``deny-writes``: DENY ACLs for the user's IDEMPOTENT_WRITE on the cluster, WRITE on every
  topic and on every transactional id. Since Kafka 3.0 (KIP-679) an idempotent
  InitProducerId is refused (CLUSTER_AUTHORIZATION_FAILED) only when the user may neither
  IDEMPOTENT_WRITE the cluster nor WRITE any topic, so refusing new PIDs this way also
  stops the user's produce requests: a circuit breaker.
* ``broker-plugin``: the principal's entry in the state topic of pidquota's broker plug-in
  (``plugin/``, docs/broker-plugin.md), which refuses its InitProducerId on every broker that
  runs the plug-in, and nothing else: its producers that have their PID go on. Narrowed
  (``pidquota.actuator.plugin.narrow``), the entries of its flooding client ids alone, when
  the decisions name them: its other applications still get new PIDs.

The closed loop (``escalation.py``) adds :func:`stricter` steps to a stock mechanism's controls.

Worked example: ``request_quota(1).controls("User:alice")`` is
``[(QuotaKey("user", "alice", "request_percentage"), 1.0)]``; with the addresses
``("10.0.0.5",)``, ``quota_and_connections(1, 2).controls`` adds
``(QuotaKey("ip", "10.0.0.5", "connection_creation_rate"), 2.0)`` (a whole rate: Kafka refuses a
fractional one).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from pidquota.actuate.controls import (
    AclBinding,
    ClientQuotaKey,
    ClientThrottleKey,
    Control,
    QuotaKey,
    ThrottleKey,
)

CLUSTER = "kafka-cluster"  # the one CLUSTER resource's name


@dataclass(frozen=True)
class Mechanism:
    """``controls(principal, addresses)``: the controls and pidquota's value for each; the
    addresses are the client addresses the principal has to itself (most mechanisms take
    none)."""

    name: str
    of: Callable[[str, tuple[str, ...]], list[tuple[Control, object]]]
    # the controls for only some client ids of the principal (the plug-in's narrowed throttle)
    narrow: Callable[[str, tuple[str, ...]], list[tuple[Control, object]]] | None = None

    def controls(
        self, principal: str, addresses: tuple[str, ...] = (), clients: tuple[str, ...] = ()
    ) -> list[tuple[Control, object]]:
        """The controls for ``principal``; for ``clients`` alone when given and the mechanism
        can narrow."""
        if clients and self.narrow is not None:
            return self.narrow(principal, tuple(clients))
        return self.of(principal, tuple(addresses))


def user_name(principal: str) -> str:
    """A quota's user entity: the principal without its ``User:`` type."""
    return principal.split(":", 1)[1] if principal.startswith("User:") else principal


def is_ip(text: str) -> bool:
    """An IPv4 or IPv6 address (a zone id allowed), as Kafka's IP quota entity takes it."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def request_quota(percentage: float) -> Mechanism:
    return Mechanism(
        "request-quota",
        lambda p, _: [(QuotaKey("user", user_name(p), "request_percentage"), float(percentage))],
    )


def quota_and_connections(percentage: float, rate: float) -> Mechanism:
    quota = request_quota(percentage)

    def controls(principal: str, addresses: tuple[str, ...]) -> list[tuple[Control, object]]:
        per_ip = [
            (QuotaKey("ip", a, "connection_creation_rate"), float(rate))
            for a in sorted(set(addresses))
            if is_ip(a)  # Kafka's IP entity is an address; a host name would never match
        ]
        return quota.controls(principal) + per_ip

    return Mechanism("request-quota+connection-rate", controls)


def deny_writes() -> Mechanism:
    def controls(principal: str, _: tuple[str, ...]) -> list[tuple[Control, object]]:
        return [
            (AclBinding(principal, "IDEMPOTENT_WRITE", "DENY", "CLUSTER", CLUSTER), True),
            (AclBinding(principal, "WRITE", "DENY", "TOPIC", "*"), True),
            (AclBinding(principal, "WRITE", "DENY", "TRANSACTIONAL_ID", "*"), True),
        ]

    return Mechanism("deny-writes", controls)


MAX_CLIENT = 4096  # the longest client id (UTF-16 code units) the plug-in takes in a key


def utf16_length(text: str) -> int:
    """``text``'s length as Java counts it (UTF-16 code units), as the plug-in reads its keys."""
    return len(text.encode("utf-16-le")) // 2


def _narrowed(principal: str, clients: tuple[str, ...]) -> list[tuple[Control, object]]:
    """The plug-in's throttles of ``clients`` of the principal; the whole principal when one of
    them is longer than the plug-in takes (it would skip the record, and refuse nothing)."""
    if any(utf16_length(c) > MAX_CLIENT for c in clients):
        return [(ThrottleKey(principal), True)]
    return [(ClientThrottleKey(principal, c), True) for c in sorted(set(clients))]


def broker_plugin(narrow: bool = False) -> Mechanism:
    """The plug-in's throttle of the principal; with ``narrow``, of its flooding client ids
    alone when they are known (``ClientThrottleKey``)."""
    return Mechanism(
        "broker-plugin",
        lambda p, _: [(ThrottleKey(p), True)],
        _narrowed if narrow else None,
    )


def stricter(
    principal: str, level: int, clients: tuple[str, ...], percentage: float, deny: bool
) -> list[tuple[Control, object]]:
    """The controls the closed loop's step ``level`` adds to a stock mechanism's (step 0: none).
    Step 1: ``request_percentage`` at ``percentage`` on each of the user's flooding client ids
    (the (user, client-id) quota, which Kafka puts before the user's own, so its other
    applications keep the user's), or on its ``<default>`` client when no client id is known.
    Step 2, only with ``deny`` (the operator allowed it, and the cluster grants explicitly):
    deny-writes' ACLs as well.

    Worked example: ``stricter("User:crash", 1, ("loop-7",), 0.1, False)`` is
    ``[(ClientQuotaKey("crash", "loop-7", "request_percentage"), 0.1)]``."""
    if level <= 0:
        return []
    name = user_name(principal)
    named = tuple(sorted(set(c for c in clients if c))) or (None,)
    out: list[tuple[Control, object]] = [
        (ClientQuotaKey(name, client, "request_percentage"), float(percentage)) for client in named
    ]
    if level >= 2 and deny:
        out += deny_writes().controls(principal)
    return out
