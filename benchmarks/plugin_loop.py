"""The loop closed through Kafka with the request log off (issue 54): brokers -> the plug-in's
inits topic -> ``pidquota run`` -> the state topic -> brokers, on real clients.

    python benchmarks/plugin_loop.py [--brokers 3] [--phase 60] [--version 4.1.1] [--quota 5]

``--brokers`` KRaft nodes run pidquota's plug-in, their request log at WARN (as Kafka ships
it). The clients of ``benchmarks/enforce.py`` run throughout, each in a process of its own: as
``User:crash-loop`` a kafka-python crash loop, a librdkafka crash loop, a producer per batch, a
producer anew on each error, its own rolling deploy and a steady producer; as ``User:steady`` a
rolling deploy and a steady producer. Beside them: as ``User:crash-loop``, a JVM application in a
crash loop (the Java producer, ``crash-java``: a JVM, one record, gone, again 2 s later); as
``User:steady``, a transactional application restarting every 2 s (``txn-other``).

1. **Before**: ``--phase`` seconds with the same run in dry-run (reading and deciding, acting on
   nothing: on a 2-core machine its CPU slows every client, and that is not its effect).
2. ``pidquota run --input kafka://.../pidquota-plugin-inits --input-format plugin-inits`` with the
   actuator on (``broker-plugin``; ``--whole-user``: not narrowed to the flooding client ids),
   ``User:crash-loop``'s quota ``--quota`` new PIDs per W = 60 s,
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

from scripts.kafka_broker import Cluster, request_log_at_warn  # noqa: E402

INITS = "pidquota-plugin-inits"
# beside enforce.py's: the Java producer's crash loop (a JVM application restarting), and a
# well-behaved transactional application restarting (the same transactional id each time)
EXTRA = ("crash-java", "txn-other")
PID_CLIENTS = (*enforce.PID_CLIENTS, *EXTRA)


class LoopLoad(enforce.Load):
    def __init__(self, cluster: Cluster):
        super().__init__(cluster, EXTRA)

    def _crash_java(self, client: str) -> None:
        """The offender's JVM application in a crash loop: a JVM, an idempotent Java producer, one
        record, gone; started again 2 s later (Kafka's ProducerPerformance)."""
        from scripts.kafka_broker import java_cmd

        user = enforce.OFFENDER
        jaas = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{self.cluster.users[user]}";'
        )
        config = self.cluster.workdir / "crash-java.properties"
        config.write_text(
            f"bootstrap.servers={self.cluster.sasl_bootstrap}\nclient.id={client}\nenable.idempotence=true\n"
            f"acks=all\nmax.block.ms=10000\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            f"sasl.jaas.config={jaas}\n"
        )
        cmd = java_cmd(
            self.cluster.libs, "org.apache.kafka.tools.ProducerPerformance", "--topic", "bench",
            "--num-records", "1", "--record-size", "10", "--throughput", "-1", "--producer.config", str(config),
            heap="128m",
        )  # fmt: skip
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, check=False)
        time.sleep(2)

    def _txn_other(self, client: str) -> None:
        """A well-behaved transactional application of User:steady, restarted every 2 s: its
        transactional id the same each time (the same PID, a higher epoch)."""
        p = self._kafka_python(enforce.STEADY, client, transactional_id=f"{client}-app")
        try:
            p.init_transactions()
            p.begin_transaction()
            p.send("bench", value=b"t")
            p.commit_transaction()
            with self._acked[client].get_lock():
                self._acked[client].value += 1
        finally:
            p.close()
        time.sleep(2)


def inits(cluster: Cluster, since_ms: int, until_ms: int) -> Counter:
    """The plug-in's records between two broker times, by (outcome, client id)."""
    from harness.plugin import published_inits

    return Counter(
        (i["outcome"], i["client_id"])
        for i in published_inits(cluster.bootstrap)
        if since_ms <= i["at_ms"] < until_ms
    )


def _phase(cluster: Cluster, load, seconds: float) -> dict:
    count0, acked0, t0 = cluster.producer_id_count(), load.acked, time.time()
    time.sleep(seconds)
    t1 = time.time()
    count1, acked = cluster.producer_id_count(), load.acked - acked0
    seen = inits(cluster, int(t0 * 1000), int(t1 * 1000))
    per_min = 60 / (t1 - t0)
    return {
        "granted_per_min": {c: round(seen[("granted", c)] * per_min) for c in PID_CLIENTS},
        "refused_per_min": {c: round(seen[("refused", c)] * per_min) for c in PID_CLIENTS},
        "acked_per_s": {c: round(acked[c] / (t1 - t0), 1) for c in enforce.STEADY_CLIENTS},
        "producer_id_count_per_min": round((count1 - count0) * per_min),
    }


def _run(cluster: Cluster, tmp: Path, quota: float, actuator: str, narrow: bool) -> subprocess.Popen:
    quotas = tmp / "quotas.json"
    users = {
        f"User:{enforce.OFFENDER}": {"producer_ids_rate": quota},
        "<default>": {"producer_ids_rate": 10_000},
    }
    quotas.write_text(json.dumps({"users": users}))
    cmd = [
        sys.executable, "-m", "pidquota", "run", "--output", str(tmp / f"out-{actuator}"), "--quotas", str(quotas),
        "--input", f"kafka://{cluster.bootstrap}/{INITS}", "--input-format", "plugin-inits",
        "--set", "producer.id.quota.window.size.seconds=60", "--set", "pidquota.trigger.interval.ms=1000",
        "--set", f"pidquota.actuator={actuator}", "--set", "pidquota.actuator.mechanism=broker-plugin",
        "--set", f"pidquota.actuator.plugin.narrow={str(narrow).lower()}",
        "--set", "pidquota.actuator.plugin.hand.over=false",
        # the PLAINTEXT listener's principal, a super user: the plug-in's state topic is guarded for it
        "--set", "pidquota.actuator.principal=User:ANONYMOUS",
    ]  # fmt: skip
    log = open(tmp / "run.log", "a")  # noqa: SIM115
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _deciding(tmp: Path, actuator: str, timeout_s: float = 180) -> None:
    """Until the run has written its first metrics (Spark up, reading)."""
    deadline = time.monotonic() + timeout_s
    while not list((tmp / f"out-{actuator}" / "metrics").glob("*.jsonl")) and time.monotonic() < deadline:
        time.sleep(1)


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGINT)  # its end lifts what it set
    proc.wait(120)


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
    parser.add_argument(
        "--whole-user",
        action="store_true",
        help="pidquota.actuator.plugin.narrow=false: refuse the whole user, not its flooding client ids",
    )
    args = parser.parse_args()
    from harness.plugin import plugin_jar
    from kafka.admin import NewTopic

    from pidquota.actuate.journal import Journal
    from pidquota.store.kafka import admin

    with tempfile.TemporaryDirectory(prefix="pidquota-plugin-loop-") as tmp:
        tmp = Path(tmp)
        log4j2 = request_log_at_warn(tmp, args.version)  # as Kafka ships it
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
            load = LoopLoad(cluster).start()
            narrow = not args.whole_user
            # before: the same run, acting on nothing (its CPU on this machine too, not its effect)
            proc = _run(cluster, tmp, args.quota, "dry-run", narrow)
            _deciding(tmp, "dry-run")
            before = _phase(cluster, load, args.phase)
            print(f"before (pidquota in dry-run): {json.dumps(before)}", flush=True)
            _stop(proc)
            started = time.time()
            proc = _run(cluster, tmp, args.quota, "on", narrow)
            reaction = _first_refusal(cluster, started)
            print(f"the run started; its first refusal after {reaction} s", flush=True)
            during = _phase(cluster, load, args.phase)
            print(f"during: {json.dumps(during)}", flush=True)
            _stop(proc)
            proc = None
            stopped = time.time()
            time.sleep(10)
            after = inits(cluster, int(stopped * 1000) + 5_000, int(time.time() * 1000))
            load.stop()
            journal = Journal({"kafka.bootstrap.servers": cluster.bootstrap}, "pidquota-actuator-journal")
            held = journal.load()
            journal.close()
            regranted = sum(
                n
                for (o, c), n in after.items()
                if o == "granted" and c in ("crash-py", "crash-rd", "crash-java")
            )
            print(f"after the run's end: the journal holds {len(held)} control(s); the offender's crash loops "
                  f"granted {regranted} new PIDs in the 5 s that follow the next 5 s", flush=True)  # fmt: skip
            print(f"errors by client: {dict(load.errors)}")
            _table(before, during)
        finally:
            if proc is not None:
                _stop(proc)
            cluster.stop()


def _table(before: dict, during: dict) -> None:
    print("| client | PIDs/min granted, before → during | refused/min during |")
    print("|---|---|---|")
    for c in PID_CLIENTS:
        b, d = before["granted_per_min"][c], during["granted_per_min"][c]
        print(f"| {c} | {b} → {d} | {during['refused_per_min'][c]} |")
    for c in enforce.STEADY_CLIENTS:
        print(f"| {c} (records/s) | {before['acked_per_s'][c]} → {during['acked_per_s'][c]} | - |")
    b, d = before["producer_id_count_per_min"], during["producer_id_count_per_min"]
    print(f"| ProducerIdCount growth /min | {b} → {d} | - |")


if __name__ == "__main__":
    main()
