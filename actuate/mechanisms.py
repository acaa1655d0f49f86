"""The mechanisms: which of Kafka's controls the actuator sets for a principal.

* ``request-quota``: the user's ``request_percentage`` client quota (KIP-546), at
  ``pidquota.actuator.request.percentage``. Kafka delays the responses of a user over it,
  InitProducerId's included, and mutes its connection; it grants the PID first.
* ``deny-writes``: DENY ACLs for the user's IDEMPOTENT_WRITE on the cluster, WRITE on every
  topic and on every transactional id. Since Kafka 3.0 (KIP-679) an idempotent
  InitProducerId is refused (CLUSTER_AUTHORIZATION_FAILED) only when the user may neither
  IDEMPOTENT_WRITE the cluster nor WRITE any topic, so refusing new PIDs this way also
  stops the user's produce requests: a circuit breaker.

Worked example: ``MECHANISMS["request-quota"](settings).controls("User:alice")`` is
``[(QuotaKey("user", "alice", "request_percentage"), 1.0)]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pidquota.actuate.controls import AclBinding, Control, QuotaKey

CLUSTER = "kafka-cluster"  # the one CLUSTER resource's name


@dataclass(frozen=True)
class Mechanism:
    name: str
    controls: Callable[[str], list[tuple[Control, object]]]


def user_name(principal: str) -> str:
    """A quota's user entity: the principal without its ``User:`` type."""
    return principal.split(":", 1)[1] if principal.startswith("User:") else principal


def request_quota(percentage: float) -> Mechanism:
    return Mechanism(
        "request-quota",
        lambda p: [(QuotaKey("user", user_name(p), "request_percentage"), float(percentage))],
    )


def deny_writes() -> Mechanism:
    def controls(principal: str) -> list[tuple[Control, object]]:
        return [
            (AclBinding(principal, "IDEMPOTENT_WRITE", "DENY", "CLUSTER", CLUSTER), True),
            (AclBinding(principal, "WRITE", "DENY", "TOPIC", "*"), True),
            (AclBinding(principal, "WRITE", "DENY", "TRANSACTIONAL_ID", "*"), True),
        ]

    return Mechanism("deny-writes", controls)
