"""cli/actuator.py: ``pidquota actuator status`` says who undoes what the journal holds, after
a kill -9 too (issue 42 §3); the run on the broker: tests/actuate/test_in_a_run.py."""

from __future__ import annotations

import socket
import subprocess
import sys

from pidquota.cli.actuator import UNTIL, holder


def _started(*args: str) -> subprocess.Popen:
    """A sleeping Python with ``args``, once it runs (before its exec, /proc shows its parent's)."""
    code = "import time; print('ready', flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


def test_a_pidquota_process_on_this_host_that_is_running_holds_them_and_one_that_is_gone_does_not():
    # a process whose arguments name pidquota, as `python -m pidquota run` does
    proc = _started("pidquota")
    try:
        owner = {"run": "r", "at_ms": 1_900_000_000_000, "host": socket.gethostname(), "pid": proc.pid}
        assert holder(owner) == (
            f"pidquota: held by the run of pid {proc.pid} on this host (since 2030-03-17T17:46:40Z): it undoes "
            "each control when its time is up, and all of them when it ends"
        )
    finally:
        proc.kill()
        proc.wait()
    assert holder(owner) == (
        f"pidquota: the run that set them (pid {proc.pid} on this host, since 2030-03-17T17:46:40Z) is not "
        f"running: {UNTIL}"
    )


def test_another_program_with_the_same_process_id_is_not_the_run():
    proc = _started()
    try:
        owner = {"run": "r", "at_ms": 0, "host": socket.gethostname(), "pid": proc.pid}
        assert "is not running" in holder(owner)
    finally:
        proc.kill()
        proc.wait()


def test_a_run_on_another_host_or_an_unknown_one_says_what_undoes_them_if_it_is_gone():
    other = {"run": "r", "at_ms": 0, "host": "broker-7.example", "pid": 4242}
    assert holder(other) == (
        "pidquota: held by the run of pid 4242 on broker-7.example (since 1970-01-01T00:00:00Z): it undoes "
        f"each control when its time is up, and all of them when it ends; if it is not running there, {UNTIL}"
    )
    lift = {"run": "r", "role": "lift", "at_ms": 0, "host": "h", "pid": 7}  # a lift that left some
    assert holder(lift) == (
        f"pidquota: the last to claim the journal was `pidquota actuator lift` (pid 7 on h, since "
        f"1970-01-01T00:00:00Z): {UNTIL}"
    )
    for unknown in (None, {"run": "r", "at_ms": 1}):  # an owner record of an earlier version
        assert holder(unknown) == f"pidquota: the run that set them is not known; if none is going, {UNTIL}"
