"""Free loopback ports for the servers the tests start: ``scripts/kafka_broker.py``'s
:func:`free_ports` (``n`` distinct ports, their sockets held until all are chosen), which
``tests/conftest.py`` puts on the path."""

from __future__ import annotations

from kafka_broker import free_ports

__all__ = ["free_port", "free_ports"]


def free_port() -> int:
    return free_ports(1)[0]
