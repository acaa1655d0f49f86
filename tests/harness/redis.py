"""A real redis-server on a free loopback port (Debian's ``redis-server``; tests/run.sh installs it)."""

from __future__ import annotations

import pytest

from harness import require
from harness.ports import free_port


def start_redis(workdir, *extra: str, port: int | None = None):
    """Start a redis-server on a free (or given) loopback port; wait until it listens.

    Returns (process, port). Callers terminate the process.
    """
    require("redis", "redis-server")
    import shutil
    import socket
    import subprocess
    import time

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(
            "redis-server is not installed; run the tests with `bash tests/run.sh`, which installs it"
        )
    port = port or free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.025)
    proc.kill()
    pytest.fail(f"redis-server did not start on port {port} (args {extra})")
