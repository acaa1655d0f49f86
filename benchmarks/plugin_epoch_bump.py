"""What a KIP-360 epoch bump looks like from the plug-in, with real clients (issue 54).

    python benchmarks/plugin_epoch_bump.py [--pauses 3] [--version 4.1.1]

One broker runs pidquota's plug-in with sensing on and its request log at DEBUG. Three
long-lived idempotent producers (librdkafka, the Java producer through Kafka's own
``ProducerPerformance``, kafka-python) send a record every 50 ms. ``--pauses`` times, the
broker is stopped (SIGSTOP) for 6 s and continued: the records in flight time out
(``message.timeout.ms`` / ``delivery.timeout.ms`` 3 s), and an idempotent producer whose batch
timed out must bump its epoch before it sends again (KIP-360): by InitProducerId with its
PID and epoch (a new PID to the plug-in, which sees the request and not its fields), or on its
own.

Prints, per client, the InitProducerIds the request log saw (new: ``producerId`` -1; bumps:
its own PID) and the lines the plug-in published: the bumps are the PIDs the plug-in counts
and the request log does not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
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

from scripts.kafka_broker import Cluster, java_cmd  # noqa: E402

INITS = "pidquota-plugin-inits"
CLIENTS = {"librdkafka": "bump-rd", "java": "bump-java", "kafka-python": "bump-py"}


def _sasl(cluster: Cluster, user: str) -> dict:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": cluster.users[user],
    }


def _librdkafka(cluster: Cluster, until: float) -> None:
    from confluent_kafka import Producer

    user = CLIENTS["librdkafka"]
    p = Producer(
        {"bootstrap.servers": cluster.sasl_bootstrap, "client.id": f"{user}-app", "enable.idempotence": True,
         "message.timeout.ms": 3000, "request.timeout.ms": 2000, **_sasl(cluster, user)}
    )  # fmt: skip
    while time.time() < until:
        with contextlib.suppress(BufferError):  # the queue full while the broker is stopped
            p.produce("bench", b"r")
        p.poll(0.05)
    p.flush(10)


def _kafka_python(cluster: Cluster, until: float) -> None:
    from kafka import KafkaProducer

    user = CLIENTS["kafka-python"]
    p = KafkaProducer(
        bootstrap_servers=cluster.sasl_bootstrap, client_id=f"{user}-app", enable_idempotence=True,
        request_timeout_ms=2000, delivery_timeout_ms=3000, linger_ms=0, security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN", sasl_plain_username=user, sasl_plain_password=cluster.users[user],
    )  # fmt: skip
    while time.time() < until:
        with contextlib.suppress(Exception):  # a client error, as an application logs it and goes on
            p.send("bench", b"p")
        time.sleep(0.05)
    p.close(timeout=5)


def _java(cluster: Cluster, seconds: float) -> subprocess.Popen:
    user = CLIENTS["java"]
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{cluster.users[user]}";'
    )
    config = cluster.workdir / "java-producer.properties"
    config.write_text(
        f"bootstrap.servers={cluster.sasl_bootstrap}\nclient.id={user}-app\nenable.idempotence=true\n"
        "acks=all\nrequest.timeout.ms=2000\ndelivery.timeout.ms=3000\nlinger.ms=0\n"
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={jaas}\n"
    )
    cmd = java_cmd(
        cluster.libs,
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", "bench", "--num-records", str(int(20 * seconds)), "--record-size", "10",
        "--throughput", "20", "--producer.config", str(config),
        heap="256m",
    )  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _request_log(cluster: Cluster) -> Counter:
    """InitProducerIds in the request log by (user, new or bump)."""
    seen = Counter()
    for line in cluster.nodes[0].request_log.read_text(errors="replace").splitlines():
        if '"requestApiKeyName":"INIT_PRODUCER_ID"' not in line:
            continue
        body = json.loads(line[line.index("{") : line.rindex("}") + 1])
        pid = (body.get("request") or {}).get("producerId", -1)
        who = (body.get("principal") or "").removeprefix("User:")
        seen[(who, "new" if pid == -1 else "bump")] += 1
    return seen


def _published(cluster: Cluster) -> Counter:
    """The plug-in's lines by (user, outcome)."""
    from harness.plugin import published_inits

    return Counter(
        (i["principal"].removeprefix("User:"), i["outcome"]) for i in published_inits(cluster.bootstrap)
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pauses", type=int, default=3, help="times the broker is stopped for 6 s (3)")
    parser.add_argument("--version", default=None, help="Apache Kafka version (the default broker's)")
    args = parser.parse_args()
    from harness.plugin import plugin_jar
    from kafka.admin import NewTopic

    from pidquota.actuate.plugin_state import ensure_inits_topic
    from pidquota.store.kafka import admin

    with tempfile.TemporaryDirectory(prefix="pidquota-plugin-bump-") as tmp:
        cluster = Cluster(
            Path(tmp) / "kafka", plugin=plugin_jar(), kafka_version=args.version,
            users={u: f"{u}-secret" for u in ("admin", *CLIENTS.values())},
        )  # fmt: skip
        cluster.start()
        try:
            options = {"kafka.bootstrap.servers": cluster.bootstrap}
            a = admin(options)
            a.create_topics([NewTopic("bench", 1, 1)])
            a.close()
            ensure_inits_topic(options, INITS, 15_000, "")
            time.sleep(7)  # the plug-in's next check sees its topic
            seconds = 15 + args.pauses * 16
            until = time.time() + seconds
            ctx = multiprocessing.get_context("fork")
            procs = [ctx.Process(target=f, args=(cluster, until)) for f in (_librdkafka, _kafka_python)]
            for p in procs:
                p.start()
            java = _java(cluster, seconds)
            time.sleep(10)
            broker = cluster.nodes[0].proc
            for k in range(args.pauses):
                broker.send_signal(signal.SIGSTOP)
                time.sleep(6)
                broker.send_signal(signal.SIGCONT)
                print(f"pause {k + 1}: the broker stopped for 6 s", flush=True)
                time.sleep(10)
            for p in procs:
                p.join(60)
            java.wait(60)
            time.sleep(2)  # the last inits published
            logged, published = _request_log(cluster), _published(cluster)
        finally:
            cluster.stop()
    print(
        "| client | request log: new PIDs | request log: epoch bumps | plug-in: inits published (granted) |"
    )
    print("|---|---|---|---|")
    for client, user in CLIENTS.items():
        print(
            f"| {client} | {logged[(user, 'new')]} | {logged[(user, 'bump')]} | {published[(user, 'granted')]} |"
        )


if __name__ == "__main__":
    main()
