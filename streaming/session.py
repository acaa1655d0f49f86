"""The SparkSession pidquota runs in."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from conf.errors import PidquotaError
from conf.loader import Config


class JavaNotFoundError(PidquotaError, OSError):
    """Spark needs a JVM and none was found."""


def find_java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return str(java)
        raise JavaNotFoundError(f"JAVA_HOME={home!r} has no bin/java; point it at a JDK 17 or unset it")
    java = shutil.which("java")
    if java is None:
        raise JavaNotFoundError(
            "Java was not found: Spark needs a JDK 17 or 21 on PATH or in JAVA_HOME "
            "(Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless)"
        )
    return java


def spark_session(config: Config):
    """Get or create the session from ``config`` (master, shuffle partitions).

    The Python workers run the interpreter running pidquota, so a fresh
    virtualenv works without setting PYSPARK_PYTHON.
    """
    find_java()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.appName("pidquota")
        .master(config["pidquota.spark.master"])
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", str(config["pidquota.spark.shuffle.partitions"]))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.stateStore.stateSchemaCheck", "true")
        .config("spark.sql.adaptive.enabled", "false")  # not used by streaming; Spark warns if on
        .getOrCreate()
    )
    spark.conf.set("spark.sql.shuffle.partitions", str(config["pidquota.spark.shuffle.partitions"]))
    spark.sparkContext.setLogLevel(config["pidquota.log.level"])
    return spark
