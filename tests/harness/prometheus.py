"""A real Prometheus (Debian's ``prometheus``; tests/run.sh installs it) on a free loopback port."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import require
from harness.ports import free_port


class Prometheus:
    """A real Prometheus (Debian's ``prometheus``; tests/run.sh installs it) on a free
    loopback port, scraping ``targets`` every second, with a query helper."""

    def __init__(self, workdir: Path, targets: list[str]):
        require("prometheus", "Prometheus")
        import shutil
        import subprocess

        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail(
                "prometheus is not installed; run the tests with `bash tests/run.sh`, which installs it"
            )
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"scrape_configs: [{{job_name: pidquota, static_configs: [{{targets: {json.dumps(targets)}}}]}}]\n"
        )
        self.log = (workdir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        import time
        import urllib.request

        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1).read()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        self.stop()
        pytest.fail(f"prometheus did not start; see {self.log.name}")

    def query(self, expr: str) -> list[dict]:
        """The instant query's result vector (``[{"metric": {...}, "value": [t, "v"]}]``)."""
        import urllib.parse
        import urllib.request

        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        body = json.load(urllib.request.urlopen(url, timeout=10))
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, expr: str) -> float | None:
        """The single value of ``expr`` now, or None when it has no result."""
        result = self.query(expr)
        assert len(result) <= 1, f"{expr} has {len(result)} series"
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.log.close()
