"""Spark's Python workers import the installed PySpark, not Spark's pyspark.zip, which they
would compile anew each (streaming/worker_site/sitecustomize.py, pidquota.spark.python.installed)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from pidquota.streaming.session import WORKER_SITE, worker_path

INSTALLED = Path(pyspark.__file__).resolve().parent
ZIP = str(INSTALLED / "python" / "lib" / "pyspark.zip")


def _site():
    spec = importlib.util.spec_from_file_location("worker_site_under_test", WORKER_SITE / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not named sitecustomize: defines, changes nothing
    return module


def test_the_zip_of_the_installed_pyspark_goes_behind_it():
    py4j = str(INSTALLED / "python" / "lib" / "py4j-src.zip")
    path = [ZIP, py4j, *sys.path]
    got = _site().installed_first(path)
    assert got == [py4j, *sys.path, ZIP]  # py4j's zip stays where Spark put it


@pytest.mark.parametrize(
    "path",
    [
        ["/opt/spark-4.1.0/python/lib/pyspark.zip", *sys.path],  # a Spark distribution's zip
        [ZIP, "/nowhere"],  # no PySpark installed on the rest of the path
        list(sys.path),  # no zip at all
    ],
)
def test_any_other_path_is_left_as_spark_set_it(path):
    assert _site().installed_first(path) == path


def test_the_setting_puts_the_folder_first_once_and_keeps_what_was_given():
    assert worker_path({}, True) == str(WORKER_SITE)
    given = {"spark.executorEnv.PYTHONPATH": "/mine"}
    assert worker_path(given, True) == os.pathsep.join([str(WORKER_SITE), "/mine"])
    again = {"spark.executorEnv.PYTHONPATH": worker_path(given, True)}
    assert worker_path(again, True) == again["spark.executorEnv.PYTHONPATH"]
    assert worker_path(given, False) == "/mine" and worker_path({}, False) == ""


def _fresh_python(pythonpath: list[str], code: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_fresh_python_with_spark_s_path_imports_the_installed_copy_only_with_the_folder():
    where = "import pyspark; print(pyspark.__file__)"
    assert _fresh_python([ZIP], where).startswith(ZIP)  # what Spark's workers did
    assert Path(_fresh_python([ZIP, str(WORKER_SITE)], where)).resolve().parent == INSTALLED


def test_the_environment_s_own_sitecustomize_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 'ran'\n")
    ran = _fresh_python([ZIP, str(WORKER_SITE), str(tmp_path)], "import builtins; print(builtins.THEIRS)")
    assert ran == "ran"
    (tmp_path / "link").symlink_to(WORKER_SITE)  # the folder twice, by two names: it runs once, not forever
    twice = [ZIP, str(tmp_path / "link"), str(WORKER_SITE), str(tmp_path)]
    assert _fresh_python(twice, "import builtins; print(builtins.THEIRS)") == "ran"


def test_the_session_s_workers_import_the_installed_pyspark(spark):
    """A task of the tests' own session (pidquota.streaming.session, the setting's default)."""
    from pidquota.streaming.session import _spark_home

    # the setting moves only this installation's zip: a SPARK_HOME of another Spark keeps its own
    assert _spark_home().resolve() == INSTALLED, f"SPARK_HOME={_spark_home()} is not the installed PySpark"

    def where(_):
        import pyspark

        yield pyspark.__file__

    (found,) = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
    assert Path(found).resolve().parent == INSTALLED, found
