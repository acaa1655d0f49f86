"""Shipping pidquota's own code to Spark executors.

Executors run Python workers of their own: the enforcer's state function, the
sources' readers and the Kafka writer all import pidquota there. On a cluster
those workers need the code, and (like every PySpark job) the dependencies:

* the **code** goes as one zip of pidquota's packages. ``pidquota run --master
  URL`` adds it to the session itself (``SparkContext.addPyFile``);
  ``pidquota package`` writes it, with an entry script, for ``spark-submit
  --py-files``;
* the **dependencies** (pyspark, pyarrow, pandas, numpy, kafka-python, redis,
  pybloom-live, numba) must be installed in the executors' Python: the same image or
  virtualenv on every node, or a packed virtualenv passed with ``--archives``.
"""

from __future__ import annotations

import importlib
import os
import tempfile
import zipfile
from pathlib import Path

# pidquota's top-level subpackages: pyproject.toml's package-dir maps each to a folder of
# the repository (a test keeps the two equal). The zip puts them all under pidquota/.
ROOT_PACKAGE = "pidquota"
SUBPACKAGES = (
    "conf",
    "bloom",
    "quota",
    "store",
    "actuate",
    "traffic",
    "formats",
    "sources",
    "streaming",
    "observe",
    "recommend",
    "cli",
)
SHIPPED_SUFFIXES = (".py", ".properties", ".json")  # code, and pyproject.toml's package-data
ZIP_NAME = "pidquota.zip"
MAIN_NAME = "pidquota_main.py"
LOG4J2_NAME = "log4j2.properties"
MAIN_SCRIPT = '''"""spark-submit's entry script for pidquota: ``spark-submit --py-files pidquota.zip
pidquota_main.py run ...`` takes the same arguments as the ``pidquota`` command."""

import sys

from pidquota.cli.main import main

sys.exit(main())
'''


def shipped() -> Path | None:
    """The zip pidquota itself is imported from (``--py-files``), which Spark sends to the
    executors; None when it is imported from files."""
    here = Path(importlib.import_module(ROOT_PACKAGE).__file__)
    return next((folder for folder in here.parents if folder.suffix == ".zip"), None)


def write_zip(path: Path) -> Path:
    """Zip pidquota's packages, as they are imported here, into ``path``: what a wheel
    holds (``.py`` files and the package data of pyproject.toml, no caches or stray
    files). Entries are in a fixed order with a fixed date, so the same code gives the
    same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in (ROOT_PACKAGE, *(f"{ROOT_PACKAGE}.{sub}" for sub in SUBPACKAGES)):
            root = Path(importlib.import_module(package).__file__).parent
            files = root.glob("*") if package == ROOT_PACKAGE else root.rglob("*")
            for file in sorted(files):
                if file.is_file() and "__pycache__" not in file.parts and file.suffix in SHIPPED_SUFFIXES:
                    name = f"{package.replace('.', '/')}/{file.relative_to(root).as_posix()}"
                    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
                    info.compress_type = zipfile.ZIP_DEFLATED
                    zf.writestr(info, file.read_bytes())
    tmp.chmod(0o644)  # mkstemp makes it 0600; another user may submit the job
    os.replace(tmp, path)
    return path


def package(folder: Path) -> tuple[Path, Path, Path]:
    """``FOLDER/pidquota.zip``, ``FOLDER/pidquota_main.py`` and ``FOLDER/log4j2.properties``
    (pidquota's quiet Spark logging, for ``--driver-java-options``), for ``spark-submit``."""
    from pidquota.conf.loader import CONF_DIR

    zipped = write_zip(folder / ZIP_NAME)
    main = folder / MAIN_NAME
    main.write_text(MAIN_SCRIPT, encoding="utf-8")
    logs = folder / LOG4J2_NAME
    logs.write_bytes((CONF_DIR / LOG4J2_NAME).read_bytes())
    return zipped, main, logs
