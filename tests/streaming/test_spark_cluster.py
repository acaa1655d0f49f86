"""pidquota on a real Spark standalone cluster (a master and two 1-core workers on the
loopback interface, from the installed pyspark), the ways docs/cluster.md documents.

The executors' Python cannot import pidquota from this checkout
(``tests/harness/no_project_python.py``), so every run here proves that the code was
shipped: by ``spark-submit --py-files`` with what ``pidquota package`` wrote, or
by ``pidquota run --master`` itself. The input is a generated half hour on Kafka
(pidquota's Python data sources: the Kafka source on the executors, the Kafka
writer for ``--decisions-topic``). The local-mode run every cluster run must equal
runs in the tests' own session, with the HDFS-backed state store (the cluster runs
use RocksDB).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from harness.cli import run_cli as cli

from pidquota.streaming.outputs.reader import read_output

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

EVENTS_PER_BATCH = "10000"  # 3 batches of the generated half hour


@pytest.fixture(scope="module")
def hour(kafka, tmp_path_factory):
    """A generated half hour of events (about 24,000) on the topic ``cluster-hour``: three
    batches, the lost worker's test killing it after the first (an hour, five batches, cost
    every cluster run two batches more on 1-core executors, and proved nothing more)."""
    url = f"kafka://{kafka.bootstrap}/cluster-hour"
    done = cli("generate", "--duration", "30m", "--rate", "10", "--to", url)
    assert done.returncode == 0, done.stderr
    return url


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
def dist(tmp_path_factory) -> Path:
    """What ``pidquota package`` writes: the zip, the entry script, the logging configuration."""
    folder = tmp_path_factory.mktemp("dist")
    done = cli("package", "--output", str(folder))
    assert done.returncode == 0, done.stderr
    return folder


def spark_submit(
    dist: Path, master: str, python: Path, args: list[str], cwd: Path
) -> subprocess.CompletedProcess:
    """The documented spark-submit, with executors whose Python cannot import the checkout. Its
    driver's JVM gets the tests' Java options (conftest.py: C1 alone), as every other Spark JVM
    of the tests does, pidquota's own launch and the cluster's (which spark-submit bypasses):
    with C2 compiling beside it on two cores, this run took 69 s alone instead of 34."""
    import pyspark

    log4j = f"-Dlog4j2.configurationFile={dist / 'log4j2.properties'}"
    submit = [
        str(Path(pyspark.__file__).parent / "bin" / "spark-submit"),
        *("--master", master, "--py-files", str(dist / "pidquota.zip")),
        *("--driver-java-options", f"{log4j} {os.environ.get('PIDQUOTA_SPARK_JAVA_OPTIONS', '')}".strip()),
        str(dist / "pidquota_main.py"),
        *args,
    ]
    env = {**os.environ, "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.run(submit, capture_output=True, text=True, timeout=600, env=env, cwd=cwd)


def state_provider(out: Path) -> str:
    """The state store class the query's offset log records."""
    first = (out / "_checkpoint" / "offsets" / "0").read_text().splitlines()[1]
    return json.loads(first)["conf"]["spark.sql.streaming.stateStore.providerClass"].rsplit(".", 1)[1]


@pytest.fixture(scope="module")
def local_run(hour, spark, tmp_path_factory):
    """The same input in local mode, in the tests' own session (``local[2,1]``, the same
    batches) with the HDFS-backed state store: what every cluster run (spark-submit of the
    package, or ``run --master``, both on RocksDB, the default) must decide. It was a third
    spark-submit, of the package on ``local[2]``: 75 s of the module's 290, and the cluster's
    spark-submit below already runs the package."""
    from harness.enforcer import Enforcer

    from pidquota.conf.loader import CONF_DIR
    from pidquota.quota.resolver import parse_quotas
    from pidquota.streaming.session import STATE_STORES

    quotas = parse_quotas(json.loads((CONF_DIR / "quotas.json").read_text()))  # the CLI's default
    runner = Enforcer(
        spark,
        tmp_path_factory.mktemp("local"),
        quotas,
        **{"pidquota.max.events.per.trigger": EVENTS_PER_BATCH},
    )
    key = "spark.sql.streaming.stateStore.providerClass"
    spark.conf.set(key, STATE_STORES["hdfs"][key])
    try:
        runner.run_kafka(hour)
    finally:
        spark.conf.set(key, STATE_STORES["rocksdb"][key])
    first = (runner.out / "_ck" / "offsets" / "0").read_text().splitlines()[1]
    assert json.loads(first)["conf"][key].endswith("HDFSBackedStateStoreProvider")
    d = decisions(runner.out)
    assert len(d) > 1000 and set(d.verdict) == {"ADMIT", "THROTTLE"}
    return d


def test_the_executors_python_cannot_import_pidquota(spark_cluster):
    assert subprocess.run([str(spark_cluster.python)]).returncode == 0, "pidquota is importable there"
    assert spark_cluster.alive_workers() == 2


def test_spark_submit_with_the_package_decides_as_local_mode(
    spark_cluster, hour, local_run, dist, kafka, tmp_path
):
    before = {a["id"] for a in spark_cluster.applications()}
    t0 = time.monotonic()
    args = run_args(hour, tmp_path / "out", "--decisions-topic", "cluster-decisions")
    done = spark_submit(dist, spark_cluster.url, spark_cluster.python, args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"spark-submit on the cluster: {time.monotonic() - t0:.0f} s")
    pd.testing.assert_frame_equal(decisions(tmp_path / "out"), local_run)
    assert state_provider(tmp_path / "out") == "RocksDBStateStoreProvider"
    assert [line for line in done.stderr.splitlines() if " INFO " in line] == []  # quiet
    (app,) = [a for a in spark_cluster.applications() if a["id"] not in before]
    assert app["name"] == "pidquota" and app["cores"] >= 1  # it ran on the cluster's executors
    assert len(kafka.consume("cluster-decisions")) == len(local_run)  # the Kafka writer ran there


def test_run_master_survives_a_lost_worker_and_decides_the_same(spark_cluster, hour, local_run, tmp_path):
    """Last in the module: it leaves the cluster one worker short. The checkpoint is given
    outside the output folder (on a cluster: a folder every node shares). At
    pidquota.log.level=INFO, Spark's own logging shows (the spark-submit run above shows it
    is quiet by default)."""
    out = tmp_path / "out"
    extra = ("--master", spark_cluster.url, "--checkpoint", str(tmp_path / "shared" / "ck"))
    extra += ("--set", "pidquota.log.level=INFO")
    args = [sys.executable, "-m", "pidquota", *run_args(hour, out, *extra)]
    env = {**os.environ, **on_cluster(spark_cluster)}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    t0 = time.monotonic()
    while not list((out / "decisions").glob("part-*.jsonl")) and proc.poll() is None:
        assert time.monotonic() - t0 < 300, "no first batch within 5 minutes"
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before a worker could be killed"
    spark_cluster.kill_worker(0)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    assert "Lost executor" in stderr  # Spark saw it go, and rescheduled its work
    assert " INFO " in stderr  # Spark's own logging, at INFO
    pd.testing.assert_frame_equal(decisions(out), local_run)
