"""The loop closed through Kafka with the request log off (issue 54): brokers -> the plug-in's
inits topic -> ``pidquota run`` -> the state topic -> brokers, on real clients.

    python benchmarks/plugin_loop.py [--brokers 3] [--phase 60] [--version 4.1.1] [--quota 5]

``--brokers`` KRaft nodes run pidquota's plug-in, their request log at WARN (as Kafka ships
it). The clients of ``benchmarks/enforce.py`` run throughout, each in a process of its own: as
``User:crash-loop`` a kafka-python crash loop, a librdkafka crash loop, a producer per batch, a
producer anew on each error, its own rolling deploy and a steady producer; as ``User:steady`` a
rolling deploy and a steady producer.

1. **Before**: ``--phase`` seconds with no pidquota run (the plug-in publishes, nobody reads).
2. ``pidquota run --input kafka://.../pidquota-plugin-inits --input-format plugin-inits`` with the
   actuator on (``broker-plugin``), ``User:crash-loop``'s quota ``--quota`` new PIDs per W = 60 s,
   every other user's 10,000; the time to the offender's first refusal is printed.
3. **During**: ``--phase`` seconds with the run throttling.
4. The run stops (Ctrl-C, ``hand.over=false``: its end lifts what it set); then whether the
   offender is granted new PIDs again and the journal holds nothing (exact undo).

Per phase and client: the PIDs the brokers granted per minute (read from the plug-in's own
records: ``outcome`` granted, by client id), the steady producers' acknowledged records per
second, and the brokers' ``ProducerIdCount`` growth per minute (KIP-847, Kafka's JmxTool).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # scripts.*
sys.path.insert(0, str(ROOT / "tests"))  # harness.*
sys.path.insert(0, str(ROOT / "benchmarks"))  # enforce's clients

import enforce  # noqa: E402

from scripts.kafka_broker import LOG4J2, Cluster  # noqa: E402

INITS = "pidquota-plugin-inits"


def inits(cluster: Cluster, since_ms: int, until_ms: int) -> Counter:
    """The plug-in's records between two broker times, by (outcome, client id)."""
    from kafka import TopicPartition

    from pidquota.store.kafka import consumer

    c = consumer({"kafka.bootstrap.servers": cluster.bootstrap})
    parts = [TopicPartition(INITS, p) for p in c.partitions_for_topic(INITS) or ()]
    c.assign(parts)
    c.seek_to_beginning(*parts)
    ends, seen = c.end_offsets(parts), Counter()
    while any(c.position(tp) < ends[tp] for tp in parts):
        for records in c.poll(500).values():
            for r in records:
                for line in r.value.splitlines():  # a record holds a line per init
                    init = json.loads(line)
                    if since_ms <= init["at_ms"] < until_ms:
                        seen[(init["outcome"], init["client_id"])] += 1
    c.close()
    return seen


def _phase(cluster: Cluster, load, seconds: float) -> dict:
    count0, acked0, t0 = cluster.producer_id_count(), load.acked, time.time()
    time.sleep(seconds)
    t1 = time.time()
    count1, acked = cluster.producer_id_count(), load.acked - acked0
    seen = inits(cluster, int(t0 * 1000), int(t1 * 1000))
    per_min = 60 / (t1 - t0)
    return {
        "granted_per_min": {c: round(seen[("granted", c)] * per_min) for c in enforce.PID_CLIENTS},
        "refused_per_min": {c: round(seen[("refused", c)] * per_min) for c in enforce.PID_CLIENTS},
        "acked_per_s": {c: round(acked[c] / (t1 - t0), 1) for c in enforce.STEADY_CLIENTS},
        "producer_id_count_per_min": round((count1 - count0) * per_min),
    }


def _run(cluster: Cluster, tmp: Path, quota: float) -> subprocess.Popen:
    quotas = tmp / "quotas.json"
    users = {
        f"User:{enforce.OFFENDER}": {"producer_ids_rate": quota},
        "<default>": {"producer_ids_rate": 10_000},
    }
    quotas.write_text(json.dumps({"users": users}))
    cmd = [
        sys.executable, "-m", "pidquota", "run", "--output", str(tmp / "out"), "--quotas", str(quotas),
        "--input", f"kafka://{cluster.bootstrap}/{INITS}", "--input-format", "plugin-inits",
        "--set", "producer.id.quota.window.size.seconds=60", "--set", "pidquota.trigger.interval.ms=1000",
        "--set", "pidquota.actuator=on", "--set", "pidquota.actuator.mechanism=broker-plugin",
        "--set", "pidquota.actuator.plugin.hand.over=false",
        # the PLAINTEXT listener's principal, a super user: the plug-in's state topic is guarded for it
        "--set", "pidquota.actuator.principal=User:ANONYMOUS",
    ]  # fmt: skip
    log = open(tmp / "run.log", "w")  # noqa: SIM115
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _first_refusal(cluster: Cluster, since: float, timeout_s: float = 180) -> float | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = inits(cluster, int(since * 1000), int(time.time() * 1000) + 60_000)
        if any(outcome == "refused" for outcome, _ in seen):
            return time.time() - since
        time.sleep(2)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", type=int, default=3, help="KRaft nodes, each broker and controller (3)")
    parser.add_argument("--phase", type=float, default=60.0, help="seconds before, and during (60)")
    parser.add_argument("--version", default=None, help="Apache Kafka version (the default broker's)")
    parser.add_argument("--quota", type=float, default=5.0, help="the offender's new PIDs per W = 60 s (5)")
    args = parser.parse_args()
    from harness.plugin import plugin_jar
    from kafka.admin import NewTopic

    from pidquota.actuate.journal import Journal
    from pidquota.store.kafka import admin

    with tempfile.TemporaryDirectory(prefix="pidquota-plugin-loop-") as tmp:
        tmp = Path(tmp)
        log4j2 = tmp / "log4j2-off.yaml"  # the request log at WARN, as Kafka ships it
        log4j2.write_text(LOG4J2.read_text().replace("        level: DEBUG\n", "        level: WARN\n"))
        cluster = Cluster(
            tmp / "kafka", size=args.brokers, plugin=plugin_jar(), jmx=True, kafka_version=args.version,
            log4j2=log4j2,
        )  # fmt: skip
        cluster.start()
        proc = None
        try:
            a = admin({"kafka.bootstrap.servers": cluster.bootstrap})
            a.create_topics(
                [
                    NewTopic("bench", 3, 1),
                    NewTopic("small", 1, 1, topic_configs={"max.message.bytes": "1000"}),
                ]
            )
            a.close()
            from pidquota.actuate.plugin_state import ensure_inits_topic

            ensure_inits_topic({"kafka.bootstrap.servers": cluster.bootstrap}, INITS, 15_000, "")
            time.sleep(7)  # every plug-in sees its topic
            load = enforce.Load(cluster).start()
            time.sleep(5)  # the clients connect
            before = _phase(cluster, load, args.phase)
            print(f"before: {json.dumps(before)}", flush=True)
            started = time.time()
            proc = _run(cluster, tmp, args.quota)
            reaction = _first_refusal(cluster, started)
            print(f"the run started; its first refusal after {reaction} s", flush=True)
            during = _phase(cluster, load, args.phase)
            print(f"during: {json.dumps(during)}", flush=True)
            os.killpg(proc.pid, signal.SIGINT)  # its end lifts what it set
            proc.wait(120)
            proc = None
            stopped = time.time()
            time.sleep(10)
            after = inits(cluster, int(stopped * 1000) + 5_000, int(time.time() * 1000))
            load.stop()
            journal = Journal({"kafka.bootstrap.servers": cluster.bootstrap}, "pidquota-actuator-journal")
            held = journal.load()
            journal.close()
            regranted = sum(
                n for (o, c), n in after.items() if o == "granted" and c in ("crash-py", "crash-rd")
            )
            print(f"after the run's end: the journal holds {len(held)} control(s); the offender's crash loops "
                  f"granted {regranted} new PIDs in the 5 s that follow the next 5 s", flush=True)  # fmt: skip
            print(f"errors by client: {dict(load.errors)}")
            _table(before, during)
        finally:
            if proc is not None:
                os.killpg(proc.pid, signal.SIGINT)
                proc.wait(120)
            cluster.stop()


def _table(before: dict, during: dict) -> None:
    print("| client | PIDs/min granted, before → during | refused/min during |")
    print("|---|---|---|")
    for c in enforce.PID_CLIENTS:
        b, d = before["granted_per_min"][c], during["granted_per_min"][c]
        print(f"| {c} | {b} → {d} | {during['refused_per_min'][c]} |")
    for c in enforce.STEADY_CLIENTS:
        print(f"| {c} (records/s) | {before['acked_per_s'][c]} → {during['acked_per_s'][c]} | - |")
    b, d = before["producer_id_count_per_min"], during["producer_id_count_per_min"]
    print(f"| ProducerIdCount growth /min | {b} → {d} | - |")


if __name__ == "__main__":
    main()
