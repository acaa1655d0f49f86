"""Whether pidquota decides the same from the plug-in's records as from the request log
(issue 54): one run of real clients with both on, judged twice.

    python benchmarks/plugin_agreement.py [--seconds 90] [--version 4.1.1]

One broker runs pidquota's plug-in with sensing on **and** its request log at DEBUG. Real
clients, each in a process of its own, for ``--seconds``:

- ``crash-loop``: kafka-python, a new idempotent producer per record (a crash loop);
- ``per-batch``: kafka-python, a new idempotent producer per batch of 10;
- ``per-error``: librdkafka (confluent-kafka), a new idempotent producer per record;
- ``alice``: kafka-python, a transactional producer started anew every 2 s with the same
  transactional id (a transactional application's restarts), a transaction each time;
- ``carol``: kafka-python, a rolling deploy: a new idempotent producer every 2 s;
- ``steady``: kafka-python, one idempotent producer for the whole run;
- ``idle-py`` and ``idle-rd``: one idempotent producer each for the whole run (kafka-python,
  librdkafka), a record every 8 s, on a broker that forgets an idle producer after 5 s
  (``producer.id.expiration.ms``): its next record meets UNKNOWN_PRODUCER_ID or
  OUT_OF_ORDER_SEQUENCE_NUMBER, and the client bumps its epoch (KIP-360). A client that asks
  InitProducerId for it is a new PID to the plug-in and the same PID in the request log.

Then ``pidquota run --once`` judges what the brokers saw twice, with the same quotas (10 new
PIDs per W = 60 s for the flooding users, 1,000 for the others): the request log
(``--input-format kafka-request-log``) and the plug-in's inits topic (``plugin-inits``).
Prints, per principal, the inits each input saw (granted), the distinct PIDs, the verdicts
(ADMIT, THROTTLE) and how many of them agree: a principal's verdicts in time order, one for one.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # scripts.*
sys.path.insert(0, str(ROOT / "tests"))  # harness.*

from scripts.kafka_broker import Cluster  # noqa: E402

INITS = "pidquota-plugin-inits"
USERS = ("crash-loop", "per-batch", "per-error", "alice", "carol", "steady", "idle-py", "idle-rd")
FLOODING = ("crash-loop", "per-batch", "per-error")


def _kafka_python(cluster: Cluster, user: str, **extra):
    from pidquota.store.kafka import producer

    options = {
        "kafka.bootstrap.servers": cluster.sasl_bootstrap,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.username": user,
        "kafka.sasl.password": cluster.users[user],
    }
    return producer(options, client_id=f"{user}-app", linger_ms=5, **extra)


def _client(cluster: Cluster, user: str, until: float) -> None:
    """One user's client until ``until`` (a time.time()); errors start it again, as an application."""
    while time.time() < until:
        try:
            _once(cluster, user, until)
        except Exception:
            time.sleep(0.05)


def _confluent(cluster: Cluster, user: str):
    from harness.clients import ConfluentProducer

    return ConfluentProducer(
        cluster.sasl_bootstrap, **{"client.id": f"{user}-app", "security.protocol": "SASL_PLAINTEXT",
                                   "sasl.mechanism": "PLAIN", "sasl.username": user,
                                   "sasl.password": cluster.users[user], "message.timeout.ms": 10_000}
    )  # fmt: skip


def _once(cluster: Cluster, user: str, until: float) -> None:
    if user.startswith("idle-"):
        p = _kafka_python(cluster, user) if user == "idle-py" else _confluent(cluster, user)
        try:
            while time.time() < until:
                p.send("bench", value=b"i")
                p.flush()
                time.sleep(8)
        finally:
            p.close()
    elif user in ("crash-loop", "per-batch"):
        p = _kafka_python(cluster, user)
        for _ in range(1 if user == "crash-loop" else 10):
            p.send("bench", value=b"x")
        p.flush()
        p.close()
    elif user == "per-error":
        p = _confluent(cluster, user)
        p.send("bench", value=b"x")
        p.flush()
        p.close()
    elif user == "alice":
        p = _kafka_python(cluster, user, transactional_id="alice-tx")
        p.init_transactions()
        p.begin_transaction()
        p.send("bench", value=b"t")
        p.commit_transaction()
        p.close()
        time.sleep(2)
    elif user == "carol":
        p = _kafka_python(cluster, user)
        p.send("bench", value=b"d")
        p.flush()
        p.close()
        time.sleep(2)
    else:  # steady
        p = _kafka_python(cluster, user)
        while time.time() < until:
            p.send("bench", value=b"s").get(timeout=10)
            time.sleep(0.05)
        p.close()


def _judge(cluster: Cluster, tmp: Path, name: str, quotas: Path) -> list[dict]:
    if name == "kafka-request-log":
        source = [str(cluster.nodes[0].logs)]
    else:
        source = [f"kafka://{cluster.bootstrap}/{INITS}"]
    out = tmp / f"out-{name}"
    cmd = [
        sys.executable, "-m", "pidquota", "run", "--once", "--input", *source, "--input-format", name,
        "--output", str(out), "--quotas", str(quotas), "--set", "producer.id.quota.window.size.seconds=60",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"pidquota run on {name} failed:\n{done.stderr[-3000:]}")
    rows = []
    for f in sorted((out / "decisions").rglob("*.jsonl")):
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return rows


def _init_errors(cluster: Cluster) -> Counter:
    """The request log's InitProducerIds answered with an error code, by (principal, code)."""
    errors = Counter()
    for line in cluster.nodes[0].request_log.read_text(errors="replace").splitlines():
        if '"requestApiKeyName":"INIT_PRODUCER_ID"' in line:
            body = json.loads(line[line.index("{") : line.rindex("}") + 1])
            code = (body.get("response") or {}).get("errorCode")
            if code:
                errors[(body.get("principal"), code)] += 1
    return errors


def _compare(a: list[dict], b: list[dict]) -> None:
    names = ("request log", "plug-in")
    total = agree = 0
    print(
        f"{'principal':<16} {'new PIDs (log / plug-in)':>26} {'THROTTLE (log / plug-in)':>26} {'verdicts agree':>16}"
    )
    for principal in sorted({r["principal"] for r in a + b}):
        mine = [
            [
                r["verdict"]
                for r in sorted(
                    (r for r in rows if r["principal"] == principal), key=lambda r: r["timestamp"]
                )
            ]
            for rows in (a, b)
        ]
        same = sum(x == y for x, y in zip(*mine, strict=False))
        n = max(len(m) for m in mine)
        total, agree = total + n, agree + same
        t = [Counter(m)["THROTTLE"] for m in mine]
        print(
            f"{principal:<16} {len(mine[0]):>12,} / {len(mine[1]):<11,} {t[0]:>12,} / {t[1]:<11,} {same:>7,} of {n:,}"
        )
    print(
        f"verdicts that agree, {names[0]} against {names[1]}: {agree:,} of {total:,} ({agree / max(total, 1):.2%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=90, help="how long the clients run (90)")
    parser.add_argument("--version", default=None, help="Apache Kafka version (the default broker's)")
    args = parser.parse_args()
    from harness.plugin import plugin_jar

    from pidquota.actuate.plugin_state import ensure_inits_topic
    from pidquota.store.kafka import admin

    with tempfile.TemporaryDirectory(prefix="pidquota-plugin-agreement-") as tmp:
        tmp = Path(tmp)
        cluster = Cluster(
            tmp / "kafka", plugin=plugin_jar(), kafka_version=args.version, jmx=True,
            users={u: f"{u}-secret" for u in ("admin", *USERS)},
            # an idle producer is forgotten after 5 s: its next record makes the client bump its epoch
            extra={"producer.id.expiration.ms": "5000", "producer.id.expiration.check.interval.ms": "1000"},
        )  # fmt: skip
        cluster.start()
        try:
            from kafka.admin import NewTopic

            a = admin({"kafka.bootstrap.servers": cluster.bootstrap})
            a.create_topics([NewTopic("bench", 1, 1)])
            a.close()
            ensure_inits_topic({"kafka.bootstrap.servers": cluster.bootstrap}, INITS, 15_000, "")
            time.sleep(7)  # the plug-in's next check sees its topic
            until = time.time() + args.seconds
            ctx = multiprocessing.get_context("fork")
            procs = [ctx.Process(target=_client, args=(cluster, u, until), daemon=True) for u in USERS]
            for p in procs:
                p.start()
            for p in procs:
                p.join(args.seconds + 60)
            time.sleep(3)  # the last records published
            quotas = tmp / "quotas.json"
            limits = {f"User:{u}": {"producer_ids_rate": 10} for u in FLOODING}
            quotas.write_text(json.dumps({"users": {**limits, "<default>": {"producer_ids_rate": 1000}}}))
            errors = _init_errors(cluster)
            log = _judge(cluster, tmp, "kafka-request-log", quotas)
            plugin = _judge(cluster, tmp, "plugin-inits", quotas)
        finally:
            cluster.stop()
    print(f"{args.seconds:g} s of real clients on Apache Kafka {cluster.version}, one broker:")
    _compare(log, plugin)
    print(
        "inits the broker answered with an error after authorizing them (the plug-in publishes them as "
        f"granted; the request log has no PID for them), by principal and error code: {dict(errors)}"
    )


if __name__ == "__main__":
    main()
