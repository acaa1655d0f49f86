"""Free loopback ports for the servers the tests start."""

from __future__ import annotations


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports. Their sockets stay bound until all are chosen: asked
    one at a time, the kernel may hand out the port it just gave (a broker once got one port
    for two of its listeners, and never started)."""
    import socket

    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
