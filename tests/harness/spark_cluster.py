"""A Spark standalone cluster on the loopback interface, from the installed pyspark."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from harness import require
from harness.ports import free_ports


class SparkCluster:
    """A Spark standalone cluster on the loopback interface, from the installed pyspark:
    one master and ``workers`` workers (1 core, 2 GiB each), each worker in a process
    group of its own with its executors, so :meth:`kill_worker` takes a "machine" down.

    ``python``: an executors' Python that cannot import pidquota from this checkout
    (:func:`no_project_python`), for ``spark.pyspark.python``: a job that runs with it
    shipped the code.
    """

    def __init__(self, tmp: Path, workers: int = 2):
        import pyspark

        self.home, self.tmp, self.count = Path(pyspark.__file__).parent, tmp, workers
        self.port, self.ui, *self.worker_ui = free_ports(2 + workers)  # all distinct
        self.python = no_project_python(tmp)
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list = []
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK", "PYTHONPATH"))
        }
        self.env.update(SPARK_HOME=str(self.home), SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")
        # The master, the workers and the executors they start (which inherit the workers'
        # environment): the test JVMs' options (tests/conftest.py), without which each executor
        # ran both compilers and G1. The JVM reads this variable and names it on its stderr,
        # which here is the cluster's own logs.
        self.env["JAVA_TOOL_OPTIONS"] = os.environ.get("PIDQUOTA_SPARK_JAVA_OPTIONS", "")

    def _spawn(self, name: str, *args: str):
        import subprocess

        log = (self.tmp / f"{name}.log").open("w")
        cmd = [str(self.home / "bin" / "spark-class"), *args]
        proc = subprocess.Popen(
            cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append(proc)
        return proc

    def start(self) -> SparkCluster:
        require("cluster", "a Spark standalone cluster")
        master = "org.apache.spark.deploy.master.Master"
        self._spawn(
            "master", master, "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui)
        )
        for i in range(self.count):
            work = self.tmp / f"worker{i}"
            work.mkdir(exist_ok=True)
            self._spawn(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                *("--host", "127.0.0.1", "--cores", "1", "--memory", "2g"),
                *("--webui-port", str(self.worker_ui[i]), "--work-dir", str(work)),
            )
        self.wait_for_workers(self.count)
        return self

    def alive_workers(self) -> int:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as r:
                state = json.load(r)
        except OSError:
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def applications(self) -> list[dict]:
        """The master's view of the applications that ran or run (cores, executors...)."""
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as r:
            state = json.load(r)
        return state.get("activeapps", []) + state.get("completedapps", [])

    def wait_for_workers(self, n: int, timeout_s: float = 90) -> None:
        import time

        deadline = time.monotonic() + timeout_s
        while self.alive_workers() < n:
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the Spark cluster did not get {n} workers in {timeout_s:g} s; see {self.tmp}")
            time.sleep(0.5)

    def kill_worker(self, i: int = 0) -> None:
        """SIGKILL worker ``i`` and its executors (the process group): a lost machine."""
        import signal

        os.killpg(self.procs[1 + i].pid, signal.SIGKILL)

    def stop(self) -> None:
        import signal

        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        self.procs.clear()


def no_project_python(folder: Path) -> Path:
    """An executable Python for executors that cannot import pidquota from this checkout
    (``tests/harness/no_project_python.py``)."""
    import sys

    script = Path(__file__).resolve().parent / "no_project_python.py"
    exe = folder / "python-without-pidquota"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    exe.chmod(0o755)
    return exe
