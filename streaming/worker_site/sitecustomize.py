"""Run by Python at the start of each of Spark's Python workers that pidquota's JVM starts.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python
worker's path, so a worker imports PySpark from the zip. Python never caches bytecode for
a zip: each worker compiles the PySpark modules it imports anew, about 0.8 CPU-seconds
(``import pyspark.worker`` and the data-source runners: 1.2-1.5 s from the zip, 0.4-0.5 s
installed). A streaming query starts a fresh worker for its Python data source, so every
query's start paid it.

When the zip is that of the very PySpark installed on the rest of the path (a pip
install: ``SPARK_HOME`` is that package's folder), it holds the same code, and this moves
it behind it: the worker imports the installed copy, with its compiled bytecode. Any
other zip (a Spark distribution's, another version's) stays where Spark put it.

Spark reaches this file through ``spark.executorEnv.PYTHONPATH``
(``pidquota.streaming.session``; ``pidquota.spark.python.installed``). A ``sitecustomize``
of the environment's own, which this one shadows, runs after it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib.machinery import PathFinder

HERE = os.path.dirname(os.path.realpath(__file__))


def installed_first(path: list[str]) -> list[str]:
    """``path`` with Spark's ``pyspark.zip`` moved to its end, if it is the zip of the PySpark
    installed on the rest of it (``<package>/python/lib/pyspark.zip``); else ``path`` as it is.
    py4j's zip stays: it is small, and it is the version Spark speaks."""
    zips = [p for p in path if os.path.basename(p) == "pyspark.zip"]
    if not zips:
        return path
    rest = [p for p in path if p not in zips]
    spec = PathFinder.find_spec("pyspark", rest)
    if spec is None or not spec.origin:
        return path
    lib = os.path.join(os.path.dirname(spec.origin), "python", "lib")
    if any(os.path.realpath(os.path.dirname(z)) != os.path.realpath(lib) for z in zips):
        return path
    return rest + zips


def _chain() -> None:
    """Run the environment's own ``sitecustomize``, which this file shadows, if it has one."""
    ran = sys.__dict__.setdefault("_pidquota_worker_sites", set())  # two copies must not call each other
    ran.add(HERE)
    others = [p for p in sys.path if os.path.realpath(p or ".") not in ran]
    spec = PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # Python's start (a test imports it under another name)
    sys.path[:] = installed_first(sys.path)
    _chain()
