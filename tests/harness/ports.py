"""Free loopback ports for the servers the tests start."""

from __future__ import annotations


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
