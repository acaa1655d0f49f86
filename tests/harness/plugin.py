"""pidquota's broker plug-in jar (``plugin/``), built with Maven when its sources are newer than
the jar (tests/run.sh builds it once before the workers start; a lock keeps two from building)."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugin"
JAR = PLUGIN / "target" / "pidquota-broker-plugin.jar"


def _stale() -> bool:
    if not JAR.exists():
        return True
    built = JAR.stat().st_mtime
    sources = [PLUGIN / "pom.xml", *(PLUGIN / "src" / "main").rglob("*.java")]
    return any(p.stat().st_mtime > built for p in sources)


def plugin_jar() -> Path:
    """The jar, built if missing or older than its sources (``mvn -f plugin/pom.xml package``)."""
    if not _stale():
        return JAR
    (PLUGIN / "target").mkdir(exist_ok=True)
    with open(PLUGIN / "target" / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _stale():
            mvn = shutil.which("mvn") or "mvn"
            done = subprocess.run(
                [mvn, "-B", "-q", "-f", str(PLUGIN / "pom.xml"), "package", "-DskipTests"],
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0, (
                f"the plug-in did not build:\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
            )
    return JAR


def published_inits(bootstrap: str, topic: str = "pidquota-plugin-inits") -> list[dict]:
    """Every init the brokers' plug-ins published to ``topic`` so far, a dict per line (a record
    holds a line per init), read from the beginning to the end it has now."""
    import json

    from kafka import TopicPartition

    from pidquota.store.kafka import consumer

    c = consumer({"kafka.bootstrap.servers": bootstrap})
    try:
        parts = [TopicPartition(topic, p) for p in c.partitions_for_topic(topic) or ()]
        c.assign(parts)
        c.seek_to_beginning(*parts)
        ends, out = c.end_offsets(parts), []
        while any(c.position(tp) < ends[tp] for tp in parts):
            for records in c.poll(500).values():
                out += [json.loads(line) for r in records for line in r.value.splitlines()]
        return out
    finally:
        c.close()
