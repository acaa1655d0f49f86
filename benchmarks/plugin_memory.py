"""What a state topic full of crafted keys costs a broker that runs pidquota's plug-in: its heap
after a full GC, before and after, on Apache Kafka itself (issue 53).

    python benchmarks/plugin_memory.py [--keys 100000] [--version 4.1.1] [--key-bytes 4000]

Starts a one-node broker with the plug-in, writes a heartbeat and one real throttle, and reads
the broker's heap after a full GC (``jcmd GC.run``, then ``GC.heap_info``'s used). Then writes
``--keys`` crafted keys to the state topic, as anyone who may write it could: half of them
long-ended client throttles of ``--key-bytes`` each (what grew the heap by 159 MiB before: each
one stayed until a tombstone), half open-ended user throttles (past the plug-in's bound of
10,000 entries; with ``--long``, of ``--key-bytes`` too: past its bound of characters). It waits until the plug-in has read them all (its JMX ``RecordsRead``), reads
the heap again, and prints the growth against the documented bound (ThrottleState: about
6 MiB), the plug-in's ``Entries`` and ``FailOpen``, and whether a new user is still granted.
Asserts nothing: it prints.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # scripts.*
sys.path.insert(0, str(ROOT / "tests"))  # harness.plugin

from benchmarks.actuation import crash_loop  # noqa: E402
from scripts.kafka_broker import Cluster  # noqa: E402

STATS = "io.pidquota:type=PidQuotaAuthorizer,broker=1"
TOPIC = "pidquota-throttle-state"


def heap_used_mib(pid: int) -> float:
    """The JVM's heap in use after a full GC (jcmd), in MiB."""
    subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, text=True, timeout=60, check=True)
    time.sleep(1)
    info = subprocess.run(
        ["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60
    ).stdout
    found = re.search(r"used (\d+)K", info)
    if not found:
        raise SystemExit(f"jcmd GC.heap_info said nothing of the heap:\n{info}")
    return int(found.group(1)) / 1024


def _send(cluster: Cluster, records) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=50, batch_size=1 << 20)
    n = 0
    for key, value in records:
        producer.send(TOPIC, key=key.encode(), value=None if value is None else value.encode())
        n += 1
    producer.flush(120)
    producer.close(10)
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100_000, help="crafted keys written (default 100000)")
    ap.add_argument("--key-bytes", type=int, default=4000, help="the long-ended keys' size (default 4000)")
    ap.add_argument("--version", default="4.1.1", help="Apache Kafka version (default 4.1.1)")
    ap.add_argument(
        "--long", action="store_true", help="the open-ended keys of --key-bytes too (the bound of characters)"
    )
    ap.add_argument(
        "--jar", type=Path, default=None, help="another build of the plug-in (default: plugin/'s)"
    )
    args = ap.parse_args(argv)
    from harness.plugin import plugin_jar

    with tempfile.TemporaryDirectory(prefix="plugin-memory-") as tmp:
        jar = args.jar or plugin_jar()
        cluster = Cluster(Path(tmp), plugin=jar, kafka_version=args.version, jmx=True, heap="1g")
        cluster.start()
        node = cluster.nodes[0]
        try:
            now = int(time.time() * 1000)
            sent = _send(cluster, [("h", f"{now} 3600000"), ("t:User:crash-loop", str(now + 3_600_000))])
            time.sleep(8)
            before = heap_used_mib(node.proc.pid)
            pad = "x" * max(0, args.key_bytes - 40)
            half = args.keys // 2
            crafted = [(f"c:4:loopUser:{pad}{i}", "1000") for i in range(half)]
            open_pad = pad if args.long else ""
            crafted += [(f"t:User:u{open_pad}{i}", str(1 << 53)) for i in range(args.keys - half)]
            t0 = time.monotonic()
            sent += _send(cluster, crafted)
            while cluster.jmx_value(node, STATS, "RecordsRead") < sent and time.monotonic() - t0 < 300:
                time.sleep(2)
            after = heap_used_mib(node.proc.pid)
            try:
                entries = int(cluster.jmx_value(node, STATS, "Entries"))
            except Exception:  # a plug-in before issue 53 has no such attribute
                entries = -1
            fail_open = int(cluster.jmx_value(node, STATS, "FailOpen"))
            print(
                f"Apache Kafka {args.version}, {args.keys:,} crafted keys ({half:,} long-ended of "
                f"{args.key_bytes} B, {args.keys - half:,} open-ended{' of as many' if args.long else ''}), "
                f"read in {time.monotonic() - t0:.0f} s; the plug-in {jar}"
            )
            print(
                f"heap after a full GC: {before:.1f} MiB before, {after:.1f} MiB after: {after - before:+.1f} MiB"
            )
            print(
                f"the plug-in: Entries {entries:,}, FailOpen {fail_open}; documented bound: 10,000 entries, ~6 MiB"
            )
            print(
                f"a throttled user's new producer granted while over the bound: {crash_loop(cluster, 'crash-loop', 0.1) > 0}"
            )
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
