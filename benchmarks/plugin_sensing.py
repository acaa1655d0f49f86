"""What the plug-in's sensing (publishing each InitProducerId it answers, issue 54) costs a
broker, side by side with the plug-in without it and with Kafka's own ``StandardAuthorizer``.

    python benchmarks/plugin_sensing.py [--rounds 3] [--version 4.1.1] [--flood 600] [--seconds 15]

For each round, three fresh one-node brokers one after another (the order turns each round),
the request log at WARN as Kafka ships it:

- ``StandardAuthorizer``: Kafka's own;
- ``plug-in, sensing off``: pidquota's plug-in with ``pidquota.plugin.inits.enable=false``;
- ``plug-in, sensing on``: the plug-in publishing to its inits topic (made first, so it is on).

The plug-in's state topic holds a heartbeat and another user's throttle, so it looks, as in a
run. Each broker takes two loads, as a SASL/PLAIN user that is not a super user (every request
goes through the authorizer):

- **normal mix**: Kafka's ``ProducerPerformance`` at a fixed 20,000 records/s of 100 bytes
  (acks=all) for ``--seconds``, and 20 new idempotent PIDs a second beside it;
- **init flood**: ``--flood`` InitProducerIds a second for ``--seconds`` (pipelined on one
  connection, as a crash loop's inits arrive at a broker: each one a new PID), with
  ``ProducerPerformance`` at 5,000 records/s beside it.

Prints, per load and broker, the broker process's CPU seconds during the load (its own
``/proc`` utime + stime; the median of the rounds), the ratios, ProducerPerformance's p99
latency, and for sensing on the records published against the inits granted (none dropped).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # scripts.*
sys.path.insert(0, str(ROOT / "tests"))  # harness.plugin

from scripts.kafka_broker import LOG4J2, Cluster, java_cmd  # noqa: E402

USER = "bench"
INITS = "pidquota-plugin-inits"
BROKERS = ("StandardAuthorizer", "plug-in, sensing off", "plug-in, sensing on")
STATS = "io.pidquota:type=PidQuotaAuthorizer,broker=1"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _options(cluster: Cluster) -> dict:
    return {
        "kafka.bootstrap.servers": cluster.sasl_bootstrap,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.username": USER,
        "kafka.sasl.password": cluster.users[USER],
    }


def _perf(cluster: Cluster, rate: int, seconds: float) -> subprocess.Popen:
    """ProducerPerformance at ``rate`` records/s for ``seconds``, started (its p99 in its output)."""
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{USER}" password="{cluster.users[USER]}";'
    )
    config = cluster.workdir / "producer.properties"
    config.write_text(
        f"bootstrap.servers={cluster.sasl_bootstrap}\nacks=all\nlinger.ms=5\nsecurity.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism=PLAIN\nsasl.jaas.config={jaas}\n"
    )
    cmd = java_cmd(
        cluster.libs,
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", "perf", "--num-records", str(int(rate * seconds)), "--record-size", "100",
        "--throughput", str(rate), "--producer.config", str(config),
        heap="256m",
    )  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _p99(perf: subprocess.Popen) -> float:
    out, err = perf.communicate(timeout=600)
    last = [line for line in out.splitlines() if "records sent" in line]
    if perf.returncode != 0 or not last:
        raise RuntimeError(f"ProducerPerformance failed:\n{out[-1500:]}{err[-1500:]}")
    return float(last[-1].split("ms 99th")[0].rsplit(",", 1)[1].strip())


def _inits(cluster: Cluster, rate: float, seconds: float) -> int:
    """``rate`` InitProducerIds a second for ``seconds`` on one connection, paced, at most 64 in
    flight: each a new idempotent PID. Returns how many were granted."""
    from kafka.protocol.producer import InitProducerIdRequest

    from pidquota.store.kafka import fetch_client

    client = fetch_client(_options(cluster))
    node = client.least_loaded_node()
    client.await_ready(node)
    futures, granted, t0 = [], 0, time.perf_counter()
    for i in range(int(rate * seconds)):
        while time.perf_counter() - t0 < i / rate:
            client.poll(timeout_ms=1)
        while sum(1 for f in futures if not f.is_done) >= 64:
            client.poll(timeout_ms=1)
        request = InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
        )
        futures.append(client.send(node, request))
    while any(not f.is_done for f in futures):
        client.poll(timeout_ms=50)
    granted = sum(1 for f in futures if f.succeeded() and f.value.error_code == 0)
    client.close()
    return granted


def _broker(tmp: Path, name: str, jar: Path, version: str | None) -> Cluster:
    log4j2 = tmp / "log4j2-off.yaml"  # the request log at WARN, as Kafka ships it
    log4j2.write_text(LOG4J2.read_text().replace("        level: DEBUG\n", "        level: WARN\n"))
    plugin = None if name == BROKERS[0] else jar
    extra = {"pidquota.plugin.inits.enable": "false"} if name == BROKERS[1] else {}
    cluster = Cluster(
        tmp / name.replace(" ", "-").replace(",", ""),
        users={"admin": "admin-secret", USER: f"{USER}-secret", "other": "other-secret"},
        plugin=plugin, jmx=plugin is not None, kafka_version=version, log4j2=log4j2, extra=extra,
    )  # fmt: skip
    cluster.start()
    from kafka.admin import NewTopic

    from pidquota.actuate.plugin_state import PluginState, ensure_inits_topic
    from pidquota.store.kafka import admin

    a = admin({"kafka.bootstrap.servers": cluster.bootstrap})
    a.create_topics([NewTopic("perf", 1, 1)])
    a.close()
    if plugin is not None:  # on and looking: a heartbeat, and another user throttled
        state = PluginState({"kafka.bootstrap.servers": cluster.bootstrap}, "pidquota-throttle-state")
        state.ensure("")
        state.beat(3_600_000)
        state.write("User:other", True)
        state.close()
        if name == BROKERS[2]:
            ensure_inits_topic({"kafka.bootstrap.servers": cluster.bootstrap}, INITS, 15_000, "")
        time.sleep(7)  # the plug-in's next check sees the topics
    return cluster


def _load(cluster: Cluster, produce: int, inits: float, seconds: float) -> dict:
    node = cluster.nodes[0]
    published0 = _published(cluster)
    cpu0 = cpu_seconds(node.proc.pid)
    perf = _perf(cluster, produce, seconds)
    granted = [0]
    flood = threading.Thread(target=lambda: granted.__setitem__(0, _inits(cluster, inits, seconds)))
    flood.start()
    flood.join()
    p99 = _p99(perf)
    cpu = cpu_seconds(node.proc.pid) - cpu0
    time.sleep(1)  # the last records' acks
    return {"cpu": cpu, "p99": p99, "granted": granted[0], "published": _published(cluster) - published0}


def _published(cluster: Cluster) -> int:
    if cluster.plugin is None:
        return 0
    return int(cluster.jmx_value(cluster.nodes[0], STATS, "InitsPublished"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each of the three brokers (3)")
    parser.add_argument("--version", default=None, help="Apache Kafka version (the default broker's)")
    parser.add_argument(
        "--flood", type=float, default=600, help="InitProducerIds a second in the flood (600)"
    )
    parser.add_argument("--seconds", type=float, default=15, help="each load's length (15)")
    args = parser.parse_args()
    from harness.plugin import plugin_jar

    jar = plugin_jar()
    loads = {"normal mix": (20_000, 20.0), "init flood": (5_000, args.flood)}
    got: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="pidquota-plugin-sensing-") as tmp:
        for r in range(args.rounds):
            order = BROKERS[r % 3 :] + BROKERS[: r % 3]
            for name in order:
                cluster = _broker(Path(tmp) / str(r), name, jar, args.version)
                try:
                    for load, (produce, inits) in loads.items():
                        m = _load(cluster, produce, inits, args.seconds)
                        got.setdefault((load, name), []).append(m)
                        print(
                            f"  round {r + 1}, {load}, {name}: broker CPU {m['cpu']:.2f} s, p99 {m['p99']:.0f} ms, "
                            f"inits granted {m['granted']:,}, published {m['published']:,}",
                            flush=True,
                        )
                finally:
                    cluster.stop()
    _report(got, loads, args)


def _report(got: dict, loads: dict, args) -> None:
    print(f"\nmedian of {args.rounds} rounds, {args.seconds:g} s a load:")
    for load, (produce, inits) in loads.items():
        cpu = {n: statistics.median(m["cpu"] for m in got[(load, n)]) for n in BROKERS}
        p99 = {n: statistics.median(m["p99"] for m in got[(load, n)]) for n in BROKERS}
        on = BROKERS[2]
        granted = sum(m["granted"] for m in got[(load, on)])
        published = sum(m["published"] for m in got[(load, on)])
        print(
            f"{load} ({produce:,} records/s, {inits:g} inits/s): broker CPU s "
            + ", ".join(f"{n} {cpu[n]:.2f}" for n in BROKERS)
            + f"; sensing on / off {cpu[on] / cpu[BROKERS[1]]:.3f}x, / StandardAuthorizer "
            f"{cpu[on] / cpu[BROKERS[0]]:.3f}x; produce p99 ms "
            + ", ".join(f"{n} {p99[n]:.0f}" for n in BROKERS)
            + f"; sensing on published {published:,} of {granted:,} inits granted"
        )


if __name__ == "__main__":
    main()
