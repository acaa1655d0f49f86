"""What the request log costs Apache Kafka, and what the INIT_PRODUCER_ID-only filter saves.

    python benchmarks/request_log_broker.py [--records 20000] [--restarts 30] [--rounds 2]

Starts a fresh one-node broker (scripts/kafka_broker.py) for each of three logging files and
runs the same load against each: a producer sending ``--records`` records in requests of 10, a
consumer fetching them as they come, and a crash loop of ``--restarts`` idempotent producers
(one InitProducerId each). The files:

- ``off``: the request logger at WARN, as Kafka ships it;
- ``debug``: ``docker/kafka/log4j2.yaml``, every request logged;
- ``init-only``: ``docker/kafka/log4j2-init-producer-id.yaml``, still DEBUG, with a filter on
  the appender that keeps INIT_PRODUCER_ID lines alone.

Prints, per file, the broker process's CPU seconds during the load (the lowest of
``--rounds`` rounds, which alternate), the request log's bytes and lines, and its
INIT_PRODUCER_ID lines. Each round's three runs go one after another, so they share the
host's hour.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: scripts.* from the root

from scripts.kafka_broker import LOG4J2, Cluster

FILES = {
    "off": None,  # written from LOG4J2 with the logger at WARN
    "debug": LOG4J2,
    "init-only": LOG4J2.with_name("log4j2-init-producer-id.yaml"),
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def load(bootstrap: str, records: int, restarts: int) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    stop = threading.Event()

    def consume():
        consumer = KafkaConsumer("bench", bootstrap_servers=bootstrap, fetch_max_wait_ms=100)
        while not stop.is_set():
            consumer.poll(timeout_ms=100)
        consumer.close()

    reader = threading.Thread(target=consume)
    reader.start()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    for i in range(0, records, 10):
        for k in range(10):
            producer.send("bench", value=b'{"n":%d}' % (i + k))
        producer.flush()
    producer.close()
    for _ in range(restarts):
        p = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=0)
        p.send("bench", value=b"{}")
        p.flush()
        p.close()
    stop.set()
    reader.join()


def one_run(name: str, args, tmp: Path) -> dict:
    log4j2 = FILES[name]
    if log4j2 is None:
        tmp.mkdir(parents=True, exist_ok=True)
        log4j2 = tmp / "log4j2-off.yaml"
        log4j2.write_text(LOG4J2.read_text().replace("        level: DEBUG\n", "        level: WARN\n"))
    cluster = Cluster(tmp / name, log4j2=log4j2).start()
    node = cluster.nodes[0]
    try:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        admin.create_topics([NewTopic("bench", 1, 1)])
        admin.close()
        time.sleep(1)
        log = node.request_log
        before_bytes = log.stat().st_size if log.exists() else 0
        before_lines = len(log.read_text().splitlines()) if log.exists() else 0
        cpu0, t0 = cpu_seconds(node.proc.pid), time.perf_counter()
        load(cluster.bootstrap, args.records, args.restarts)
        cpu = cpu_seconds(node.proc.pid) - cpu0
        wall = time.perf_counter() - t0
        text = log.read_text() if log.exists() else ""
        return {
            "cpu": cpu,
            "wall": wall,
            "bytes": len(text.encode()) - before_bytes,
            "lines": len(text.splitlines()) - before_lines,
            "inits": text.count('"requestApiKeyName":"INIT_PRODUCER_ID"'),
        }
    finally:
        cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--restarts", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    results: dict[str, list[dict]] = {name: [] for name in FILES}
    tmp = Path(tempfile.mkdtemp(prefix="pidquota-bench-rl-"))
    try:
        for r in range(args.rounds):
            order = list(FILES) if r % 2 == 0 else list(reversed(FILES))
            for name in order:
                results[name].append(one_run(name, args, tmp / f"round-{r}"))
                print(f"round {r + 1} {name:9s} {results[name][-1]}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    off = min(x["cpu"] for x in results["off"])
    print(f"\n{args.records:,} records in requests of 10, a consumer, {args.restarts} idempotent restarts:")
    print(
        f"{'logging':10s} {'broker CPU s':>12s} {'vs off':>7s} {'log bytes':>11s} {'lines':>7s} {'inits':>6s}"
    )
    for name, runs in results.items():
        best = min(runs, key=lambda x: x["cpu"])
        print(
            f"{name:10s} {best['cpu']:12.2f} {best['cpu'] / off:6.2f}x {best['bytes']:11,d} "
            f"{best['lines']:7,d} {best['inits']:6d}"
        )
    debug, only = results["debug"][0], results["init-only"][0]
    if only["bytes"]:
        print(
            f"\nthe filter writes {debug['bytes'] / only['bytes']:.0f}x fewer bytes "
            f"({debug['lines']:,} lines -> {only['lines']:,}), keeping {only['inits']} of {debug['inits']} inits"
        )


if __name__ == "__main__":
    main()
