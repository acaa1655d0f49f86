"""``pidquota package``: pidquota's code as a zip, an entry script and its quiet Spark logging
configuration, for ``spark-submit --py-files`` on a cluster."""

from __future__ import annotations

import argparse
from pathlib import Path

from pidquota.conf.errors import PidquotaError


def add_parser(sub) -> argparse.ArgumentParser:
    package = sub.add_parser(
        "package",
        help="write pidquota.zip, pidquota_main.py and log4j2.properties for spark-submit --py-files",
        description="Write pidquota's code as a zip, an entry script and its quiet Spark logging configuration, for spark-submit on a cluster.",
    )
    package.add_argument("--output", metavar="DIR", default="dist", help="folder to write to (%(default)s)")
    return package


def run(args: argparse.Namespace) -> int:
    """``pidquota package``: the zip and the entry script for ``spark-submit --py-files``."""
    from pidquota.streaming import ship

    try:
        zipped, main_script, logs = ship.package(Path(args.output))
    except OSError as exc:
        raise PidquotaError(f"cannot write to {args.output}: {exc.strerror or exc}") from None
    print(
        f"pidquota: wrote {zipped} ({zipped.stat().st_size // 1024} KiB), {main_script} and {logs}; "
        "on a cluster:\n"
        f"  spark-submit --master spark://HOST:7077 --py-files {zipped} "
        f'--driver-java-options "-Dlog4j2.configurationFile={logs.resolve()}" \\\n'
        f"    {main_script} run --input kafka://BROKER:9092/TOPIC --checkpoint SHARED/FOLDER --output FOLDER"
    )
    return 0
