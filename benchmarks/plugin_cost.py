"""What pidquota's broker plug-in costs a broker, side by side on Apache Kafka itself.

    python benchmarks/plugin_cost.py [--records 300000] [--rounds 2] [--version 4.1.1]

Runs Kafka's own ``ProducerPerformance`` (from the same jars as the broker) as a SASL/PLAIN
user that is not a super user, so that every request goes through the authorizer, against a
fresh one-node broker whose authorizer is Kafka's ``StandardAuthorizer``, then against one
whose authorizer is the plug-in (``io.pidquota.plugin.PidQuotaAuthorizer``, which wraps it),
``--rounds`` times each, alternating. The plug-in's state topic holds a heartbeat and one
throttled user (another one), so it is on and looking, as in a run.

Prints each run's records/s, the median of each authorizer and their ratio; then, after 200
InitProducerIds of a crash loop (a new kafka-python producer each), the plug-in's own mean time
per InitProducerId authorization (its JMX ``MeanInitAuthorizationNanos``: the plug-in's own
look at its state, before Kafka's own authorization that it wraps).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # scripts.*
sys.path.insert(0, str(ROOT / "tests"))  # harness.plugin

from scripts.kafka_broker import Cluster, java_cmd  # noqa: E402

USER = "bench"


def _perf(cluster: Cluster, records: int) -> float:
    """One ProducerPerformance run (acks=all, idempotent, 100-byte records, unthrottled):
    records/s as it reports them."""
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{USER}" password="{cluster.users[USER]}";'
    )
    config = cluster.workdir / "producer.properties"  # (--producer-props cannot hold the JAAS line)
    config.write_text(
        f"bootstrap.servers={cluster.sasl_bootstrap}\nacks=all\nlinger.ms=5\nsecurity.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism=PLAIN\nsasl.jaas.config={jaas}\n"
    )
    cmd = java_cmd(
        cluster.libs,
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        "perf",
        "--num-records",
        str(records),
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--producer.config",
        str(config),
        heap="512m",
    )
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    last = [line for line in done.stdout.splitlines() if "records sent" in line]
    if done.returncode != 0 or not last:
        raise RuntimeError(f"ProducerPerformance failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    return float(last[-1].split(",")[1].split("records/sec")[0].strip())


def _mean_init_nanos(cluster: Cluster) -> float:
    name = "io.pidquota:type=PidQuotaAuthorizer,broker=1"
    return cluster.jmx_value(cluster.nodes[0], name, "MeanInitAuthorizationNanos")


def _inits(cluster: Cluster, n: int) -> None:
    from kafka import KafkaProducer

    for _ in range(n):
        p = KafkaProducer(
            bootstrap_servers=cluster.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username=USER,
            sasl_plain_password=cluster.users[USER],
            enable_idempotence=True,
        )
        p.send("perf", b"x").get(timeout=10)
        p.close(timeout=1)


def _cluster(tmp: Path, name: str, plugin: Path | None, version: str | None) -> Cluster:
    cluster = Cluster(
        tmp / name,
        users={"admin": "admin-secret", USER: f"{USER}-secret", "other": "other-secret"},
        plugin=plugin,
        jmx=True,
        kafka_version=version,
    )
    cluster.start()
    from kafka.admin import NewTopic

    from pidquota.store.kafka import admin

    a = admin({"kafka.bootstrap.servers": cluster.bootstrap})
    a.create_topics([NewTopic("perf", 1, 1)])
    a.close()
    if plugin is not None:  # on and looking: a heartbeat, and another user throttled
        from pidquota.actuate.plugin_state import PluginState

        state = PluginState({"kafka.bootstrap.servers": cluster.bootstrap}, "pidquota-throttle-state")
        state.ensure("")
        state.beat(3_600_000)
        state.write("User:other", True)
        state.close()
        time.sleep(2)  # the brokers read it
    return cluster


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=300_000, help="records per ProducerPerformance run")
    parser.add_argument("--rounds", type=int, default=2, help="runs per authorizer, alternating (2)")
    parser.add_argument("--version", default=None, help="Apache Kafka version (the default broker's)")
    args = parser.parse_args()
    from harness.plugin import plugin_jar

    jar = plugin_jar()
    rates: dict[str, list[float]] = {"StandardAuthorizer": [], "pidquota plug-in": []}
    nanos = None
    with tempfile.TemporaryDirectory(prefix="pidquota-plugin-cost-") as tmp:
        for i in range(args.rounds):
            for name, plugin in (("StandardAuthorizer", None), ("pidquota plug-in", jar)):
                cluster = _cluster(Path(tmp), f"{i}-{plugin is not None}", plugin, args.version)
                try:
                    rate = _perf(cluster, args.records)
                    rates[name].append(rate)
                    print(f"  round {i + 1}, {name}: {rate:,.0f} records/s", flush=True)
                    if plugin is not None and nanos is None:
                        _inits(cluster, 200)
                        nanos = _mean_init_nanos(cluster)
                finally:
                    cluster.stop()
    base, ours = (statistics.median(rates[n]) for n in rates)
    print(
        f"ProducerPerformance, median of {args.rounds}: StandardAuthorizer {base:,.0f} records/s, "
        f"pidquota plug-in {ours:,.0f} records/s: {ours / base:.3f}x"
    )
    print(f"the plug-in's mean time per InitProducerId authorization (200 inits): {nanos / 1000:.1f} µs")


if __name__ == "__main__":
    main()
