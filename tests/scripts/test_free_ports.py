"""scripts/kafka_broker.py's free_ports: below the kernel's ephemeral range, where no outgoing
connection takes a port between its choice and a server's bind (a broker of the suite once
failed to start with "Address already in use")."""

from __future__ import annotations

import socket

import kafka_broker


def test_ports_are_distinct_free_and_below_the_ephemeral_range():
    low = kafka_broker._ephemeral_low()
    ports = kafka_broker.free_ports(50)
    assert len(set(ports)) == 50 and all(10_000 <= p < low for p in ports)
    for p in ports[:5]:  # free: a server binds it
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_in_use_is_passed_over(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        used = taken.getsockname()[1]
        picks = iter([used, used, *range(20_001, 20_101)])
        monkeypatch.setattr(kafka_broker, "_ephemeral_low", lambda: 65_000)
        monkeypatch.setattr("random.randrange", lambda a, b: next(picks))
        [port] = kafka_broker.free_ports(1)
        assert port != used and 20_001 <= port <= 20_100
