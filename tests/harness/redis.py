"""A real redis-server on a free loopback port (Debian's ``redis-server``; tests/run.sh installs it)."""

from __future__ import annotations

import pytest

from harness import require
from harness.ports import free_port, free_ports


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


def tls_files(workdir) -> dict:
    """A test CA and a server certificate for 127.0.0.1 and localhost, made with openssl
    (tests/run.sh installs it): {"ca": ..., "cert": ..., "key": ...} paths under ``workdir``."""
    import shutil
    import subprocess
    from pathlib import Path

    if shutil.which("openssl") is None:
        pytest.fail("openssl is not installed; run the tests with `bash tests/run.sh`, which installs it")
    d = Path(workdir)
    ca, ca_key, cert, key, csr, ext = (
        d / n for n in ("ca.crt", "ca.key", "server.crt", "server.key", "s.csr", "s.ext")
    )
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for cmd in (
        f"req -x509 -newkey rsa:2048 -nodes -keyout {ca_key} -out {ca} -days 2 -subj /CN=pidquota-test-CA",
        f"req -newkey rsa:2048 -nodes -keyout {key} -out {csr} -subj /CN=localhost",
        f"x509 -req -in {csr} -CA {ca} -CAkey {ca_key} -CAcreateserial -out {cert} -days 2 -extfile {ext}",
    ):
        subprocess.run(["openssl", *cmd.split()], check=True, capture_output=True)
    return {"ca": ca, "cert": cert, "key": key}


def start_redis_tls(workdir):
    """A redis-server with a TLS port (``tls-port``; clients need not show a certificate) beside
    its plain one. Returns (process, the TLS port, the CA file)."""
    files = tls_files(workdir)
    port, tls_port = free_ports(2)  # distinct
    proc, _ = start_redis(
        workdir,
        "--tls-port", str(tls_port),
        "--tls-cert-file", str(files["cert"]),
        "--tls-key-file", str(files["key"]),
        "--tls-ca-cert-file", str(files["ca"]),
        "--tls-auth-clients", "no",
        port=port,
    )  # fmt: skip
    return proc, tls_port, files["ca"]
