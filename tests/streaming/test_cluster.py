"""pidquota on a real Spark standalone cluster (a master and two 1-core workers on the
loopback interface, from the installed pyspark), the ways the README documents.

The executors' Python cannot import pidquota from this checkout
(``tests/no_project_python.py``), so every run here proves that the code was
shipped: by ``spark-submit --py-files`` with what ``pidquota package`` wrote, or
by ``pidquota run --master`` itself. The input is a generated hour on Kafka
(pidquota's Python data sources: the Kafka source on the executors, the Kafka
writer for ``--decisions-topic``); the demo source runs there too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import read_output

EVENTS_PER_BATCH = "10000"  # about 5 batches of the generated hour


@pytest.fixture(scope="module")
def hour(kafka, tmp_path_factory):
    """A generated hour of events (about 48,000) on the topic ``cluster-hour``."""
    url = f"kafka://{kafka.bootstrap}/cluster-hour"
    done = cli("generate", "--duration", "1h", "--rate", "10", "--to", url)
    assert done.returncode == 0, done.stderr
    return url


def cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streaming.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def run_args(url: str, out: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--input",
        url,
        "--output",
        str(out),
        "--once",
        "--set",
        f"pidquota.max.events.per.trigger={EVENTS_PER_BATCH}",
        *extra,
    ]


def on_cluster(cluster) -> dict:
    """The environment of a driver on this machine whose executors cannot import pidquota."""
    return {"PYSPARK_PYTHON": str(cluster.python), "PYSPARK_DRIVER_PYTHON": sys.executable}


def decisions(out: Path) -> pd.DataFrame:
    d = read_output(out, "decisions")
    return d.sort_values(list(d.columns)).reset_index(drop=True)


@pytest.fixture(scope="module")
def local_run(hour, tmp_path_factory):
    """The same input in local mode: what every cluster run must decide."""
    out = tmp_path_factory.mktemp("local") / "out"
    done = cli(*run_args(hour, out))
    assert done.returncode == 0, done.stderr
    d = decisions(out)
    assert len(d) > 1000 and set(d.verdict) == {"ADMIT", "THROTTLE"}
    return d


def test_the_executors_python_cannot_import_pidquota(spark_cluster):
    assert subprocess.run([str(spark_cluster.python)]).returncode == 0, "pidquota is importable there"
    assert spark_cluster.alive_workers() == 2


def test_spark_submit_with_the_package_decides_as_local_mode(spark_cluster, hour, local_run, kafka, tmp_path):
    import pyspark

    packaged = cli("package", "--output", str(tmp_path / "dist"))
    assert packaged.returncode == 0, packaged.stderr
    dist = tmp_path / "dist"
    out = tmp_path / "out"
    submit = [
        str(Path(pyspark.__file__).parent / "bin" / "spark-submit"),
        *("--master", spark_cluster.url, "--py-files", str(dist / "pidquota.zip")),
        *("--driver-java-options", f"-Dlog4j2.configurationFile={dist / 'log4j2.properties'}"),
        str(dist / "pidquota_main.py"),
        *run_args(hour, out, "--decisions-topic", "cluster-decisions"),
    ]
    t0 = time.monotonic()
    done = subprocess.run(
        submit,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **on_cluster(spark_cluster)},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"spark-submit on the cluster: {time.monotonic() - t0:.0f} s")
    pd.testing.assert_frame_equal(decisions(out), local_run)
    assert [line for line in done.stderr.splitlines() if " INFO " in line] == []  # quiet
    apps = spark_cluster.applications()
    assert apps and all(a["cores"] >= 1 for a in apps)  # it ran on the cluster's executors
    assert len(kafka.consume("cluster-decisions")) == len(local_run)  # the Kafka writer ran there


def test_the_demo_runs_on_the_cluster(spark_cluster, tmp_path):
    done = cli(
        "run",
        "--master",
        spark_cluster.url,
        "--output",
        str(tmp_path / "out"),
        "--duration",
        "25s",
        env=on_cluster(spark_cluster),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(read_output(tmp_path / "out", "decisions")) > 0


def test_run_master_survives_a_lost_worker_and_decides_the_same(spark_cluster, hour, local_run, tmp_path):
    """Last in the module: it leaves the cluster one worker short."""
    out = tmp_path / "out"
    args = [sys.executable, "-m", "streaming.cli", *run_args(hour, out, "--master", spark_cluster.url)]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **on_cluster(spark_cluster)},
    )
    t0 = time.monotonic()
    while not list((out / "decisions").glob("part-*.jsonl")) and proc.poll() is None:
        assert time.monotonic() - t0 < 300, "no first batch within 5 minutes"
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before a worker could be killed"
    spark_cluster.kill_worker(0)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    assert "Lost executor" in stderr  # Spark saw it go, and rescheduled its work
    pd.testing.assert_frame_equal(decisions(out), local_run)
