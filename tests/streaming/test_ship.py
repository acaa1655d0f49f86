"""Shipping the code (streaming/ship.py) and choosing the master (streaming/session.py),
without Spark. The cluster itself is in test_spark_cluster.py."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
from harness.cli import run_cli

from pidquota.conf.errors import ConfigError, PidquotaError
from pidquota.streaming import session, ship

ROOT = Path(__file__).resolve().parents[2]


def test_the_zip_holds_every_package_of_the_project_and_its_data():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {ship.ROOT_PACKAGE, *(f"{ship.ROOT_PACKAGE}.{sub}" for sub in ship.SUBPACKAGES)}
    assert mapped == set(setuptools["package-dir"])
    data = {  # the zip ships files by suffix: every package-data file's suffix is shipped
        Path(pattern).suffix for patterns in setuptools["package-data"].values() for pattern in patterns
    }
    assert set(ship.SHIPPED_SUFFIXES) == {".py", *data}


def test_the_zip_is_the_code_without_caches_and_the_same_bytes_each_time(tmp_path):
    a = ship.write_zip(tmp_path / "a" / "pidquota.zip")
    b = ship.write_zip(tmp_path / "b" / "pidquota.zip")
    assert a.read_bytes() == b.read_bytes()
    names = zipfile.ZipFile(a).namelist()
    assert (
        "pidquota/__init__.py" in names
        and "pidquota/cli/main.py" in names
        and "pidquota/sources/kafka/fetch.py" in names
        and "pidquota/conf/pidquota.properties" in names
        and "pidquota/conf/log4j2.properties" in names
    )
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    (ROOT / "conf" / ".notes.swp").write_text("an editor's file")
    try:
        assert ".notes.swp" not in str(zipfile.ZipFile(ship.write_zip(tmp_path / "c.zip")).namelist())
    finally:
        (ROOT / "conf" / ".notes.swp").unlink()
    assert {n.split("/")[0] for n in names} == {"pidquota"}  # one import root, nothing else
    assert {n.split("/")[1] for n in names if n.count("/") > 1} == set(ship.SUBPACKAGES)


def test_the_packaged_entry_script_runs_pidquota_from_the_zip_alone(tmp_path):
    """With a Python that cannot import the checkout (as an executor's), the zip is enough:
    the CLI runs, and its settings and default quotas are read from inside the zip."""
    done = run_cli("package", "--output", str(tmp_path / "dist"))
    assert done.returncode == 0, done.stderr
    assert "spark-submit --master spark://HOST:7077 --py-files" in done.stdout
    dist = tmp_path / "dist"
    assert {p.name for p in dist.iterdir()} == {"pidquota.zip", "pidquota_main.py", "log4j2.properties"}
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from pidquota.conf.loader import load; import pidquota.cli.main, pidquota.streaming.ship as s; "
        "c = load(environ={}); print(c['pidquota.state.buckets'], c.quotas_path().is_file(), s.shipped())"
    )
    npp = ROOT / "tests" / "harness" / "no_project_python.py"
    out = subprocess.run(
        [sys.executable, str(npp), "-c", probe, str(dist / "pidquota.zip")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["64", "True", str(dist / "pidquota.zip")]
    bare = subprocess.run([sys.executable, str(npp), "-c", "import pidquota"], capture_output=True, text=True)
    assert "No module named 'pidquota'" in bare.stderr  # without the zip it is not there


@pytest.mark.parametrize(
    "flag, given, chosen",
    [
        (None, None, "local[2]"),  # nobody gave one: pidquota.spark.master
        (None, "spark://m:7077", "spark://m:7077"),  # spark-submit's wins over the setting
        ("spark://m:7077", None, "spark://m:7077"),  # pidquota run --master
        ("local[3]", "local[3]", "local[3]"),
    ],
)
def test_the_master_given_to_spark_wins_over_the_setting(flag, given, chosen):
    assert session.choose_master(flag, given, "local[2]") == chosen


@pytest.mark.parametrize(
    ("master", "run_as"),
    [
        ("local", "local[1,4]"),
        ("local[2]", "local[2,4]"),
        ("local[*]", "local[*,4]"),
        ("local[2,1]", "local[2,1]"),  # attempts given: kept
        ("local-cluster[2,1,1024]", "local-cluster[2,1,1024]"),
        ("spark://m:7077", "spark://m:7077"),
        ("yarn", "yarn"),
    ],
)
def test_a_local_master_retries_a_failed_task_as_a_cluster_does(master, run_as):
    assert session.with_task_retries(master) == run_as


def test_two_different_masters_or_a_malformed_one_are_refused():
    with pytest.raises(ConfigError, match=r"--master local\[2\] disagrees with spark.master=spark://m:7077"):
        session.choose_master("local[2]", "spark://m:7077", "local[2]")
    with pytest.raises(ConfigError, match="'spark:/m' is not a master URL; use local"):
        session.choose_master("spark:/m", None, "local[2]")


class Conf(dict):
    def get(self, key, default=None):
        return super().get(key, default)


def test_spark_submit_s_default_master_does_not_count_as_given(monkeypatch):
    """spark-submit says local[*] when nobody gave a master; pidquota.spark.master applies then."""
    monkeypatch.delenv("MASTER", raising=False)
    monkeypatch.setattr(session, "launch_settings", lambda: {"spark.submit.pyFiles": "z.zip"})
    assert session.given_master(Conf({"spark.master": "local[*]"})) is None
    assert session.given_master(Conf({"spark.master": "spark://m:7077"})) == "spark://m:7077"
    assert session.given_master(Conf()) is None
    monkeypatch.setattr(session, "launch_settings", lambda: {"spark.master": "local[*]"})
    assert session.given_master(Conf({"spark.master": "local[*]"})) == "local[*]"


def test_only_spark_submit_s_own_options_count_not_the_application_s():
    opts = "--master spark://m:7077 --py-files z.zip --verbose --conf spark.x=1 --driver-java-options -Dy=2"
    assert session.submit_options([*opts.split(), "--driver-memory", "3g", "main.py", "run"]) == {
        "spark.master": "spark://m:7077",
        "spark.x": "1",
        "spark.driver.extraJavaOptions": "-Dy=2",
        "spark.driver.memory": "3g",
    }
    assert session.submit_options(["--conf=spark.master=local[3]", "pyspark-shell"]) == {
        "spark.master": "local[3]"
    }
    app_args = "--py-files z.zip main.py run --master spark://h:7077 --set pidquota.spark.master=local[4]"
    assert session.submit_options(app_args.split()) == {}


@pytest.mark.parametrize(
    "given, memory, launched",
    [
        ({}, "6g", "6g"),  # pidquota starts the JVM: its heap is the setting
        ({}, "", None),  # empty: Spark's own default
        ({"spark.driver.memory": "2g"}, "6g", None),  # --driver-memory or spark-defaults.conf win
    ],
)
def test_the_driver_memory_setting_sizes_the_jvm_pidquota_starts(monkeypatch, given, memory, launched):
    from pyspark import SparkContext

    class Launched(Exception):
        pass

    def launch(conf):
        raise Launched(conf.get("spark.driver.memory", None))

    monkeypatch.setattr(SparkContext, "_gateway", None)  # no JVM yet, whatever the session holds
    monkeypatch.setattr(session, "launch_settings", lambda: given)
    monkeypatch.setattr(session, "_launch", launch)
    with pytest.raises(Launched) as started:
        session._gateway(memory)
    assert started.value.args[0] == launched


def test_spark_defaults_conf_is_read_as_java_properties():
    text = "# spark.master local[1]\nspark.master.ui.port 8080\nspark.master   spark://a:7077\nspark.x=1\n  spark.y: 2\n"
    assert session.defaults_options(text) == {
        "spark.master.ui.port": "8080",
        "spark.master": "spark://a:7077",
        "spark.x": "1",
        "spark.y": "2",
    }
    assert "spark.master" not in session.defaults_options(
        "spark.master.rest.enabled true\n# spark.master x\n"
    )


def test_a_spark_master_that_does_not_answer_is_one_line(monkeypatch):
    from harness.ports import free_port

    port = free_port()
    with pytest.raises(
        PidquotaError, match=rf"cannot reach the Spark master spark://127.0.0.1:{port} .*refused"
    ):
        session.check_master(f"spark://127.0.0.1:{port}")
    session.check_master("local[2]")  # nothing to reach
    with pytest.raises(PidquotaError, match=rf"\[::1\]:{port}: ") as failed:
        session.check_master(f"spark://[::1]:{port}")  # the host without its brackets
    assert "not known" not in str(failed.value)  # it was looked up as an address, not a name
