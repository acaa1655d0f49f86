"""Each init counted once through the loop, across kill -9 of pidquota and of a broker (issue 54).

    python benchmarks/plugin_exactly_once.py [--rate 150] [--seconds 60] [--version 4.1.1]

Three KRaft nodes run pidquota's plug-in (the request log at WARN). A flood of ``--rate``
InitProducerIds a second, each a new idempotent PID, goes to the three brokers in turn for
``--seconds``; ``pidquota run`` reads the plug-in's inits topic and sends its decisions to a
topic, exactly once (``pidquota.kafka.sink.mode``, the default). Mid-flood:

- at 1/4 of it, the run is killed with -9 (Spark's JVM with it) and started again on its
  checkpoint;
- at 1/2, broker 2 is killed with -9, and started again 10 s later.

When the run has caught up, everything is read back:

- the inits topic: each line's ``(broker, run, seq)``; a line twice is a producer's retry,
  a ``seq`` missing inside a run of ``(broker, run)`` an init not published;
- the decisions topic with ``isolation.level=read_committed``: each decision's PID, the hash
  of its init's ``(broker, run, seq)`` (``formats/plugin_inits.synthetic_pid``);
- the flood's own count of the inits each broker granted.

Prints, per broker: inits granted (the flood's count), published (distinct lines), the lines
sent twice, the gaps; then the decisions: the PIDs decided once, more than once (counted
twice), and published but never decided (lost), and decisions of no published init.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
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
sys.path.insert(0, str(ROOT / "tests"))  # harness.plugin

from scripts.kafka_broker import Cluster, request_log_at_warn  # noqa: E402

INITS, DECISIONS, USER = "pidquota-plugin-inits", "decisions", "flood"


def flood(bootstrap: str, password: str, nodes: list[int], rate: float, seconds: float, granted) -> None:
    """``rate`` InitProducerIds a second for ``seconds``, to each broker in turn, at most 32 in
    flight a broker; ``granted[node]`` counts each broker's granted ones. A broker that is down
    is skipped until it answers again."""
    from kafka.protocol.producer import InitProducerIdRequest

    from pidquota.store.kafka import fetch_client

    client = fetch_client(
        {
            "kafka.bootstrap.servers": bootstrap,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": USER,
            "kafka.sasl.password": password,
        }
    )
    client.poll(timeout_ms=1000)
    futures: list[tuple[int, object]] = []
    t0, i = time.perf_counter(), 0
    while (now := time.perf_counter() - t0) < seconds:
        if now < i / rate:
            client.poll(timeout_ms=1)
            continue
        node = nodes[i % len(nodes)]
        i += 1
        if not client.ready(node) or sum(1 for n, f in futures if n == node and not f.is_done) >= 32:
            client.poll(timeout_ms=1)
            continue  # down, or slow: this init is not sent
        request = InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
        )
        futures.append((node, client.send(node, request)))
    deadline = time.monotonic() + 30
    while any(not f.is_done for _, f in futures) and time.monotonic() < deadline:
        client.poll(timeout_ms=50)
    for node, f in futures:
        if f.is_done and f.succeeded() and f.value.error_code == 0:
            granted[node] = granted.get(node, 0) + 1
    client.close()


def _run(cluster: Cluster, tmp: Path) -> subprocess.Popen:
    quotas = tmp / "quotas.json"
    quotas.write_text(json.dumps({"users": {"<default>": {"producer_ids_rate": 1_000_000}}}))
    cmd = [
        sys.executable, "-m", "pidquota", "run", "--output", str(tmp / "out"), "--quotas", str(quotas),
        "--input", f"kafka://{cluster.bootstrap}/{INITS}", "--input-format", "plugin-inits",
        "--decisions-topic", DECISIONS, "--set", "pidquota.trigger.interval.ms=1000",
        "--set", "pidquota.actuator.principal=User:ANONYMOUS",
    ]  # fmt: skip
    log = open(tmp / "run.log", "a")  # noqa: SIM115
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _read(cluster: Cluster, topic: str, committed: bool) -> list[bytes]:
    """Every record's value in ``topic``, from the start to its end now."""
    from kafka import TopicPartition

    from pidquota.store.kafka import consumer

    c = consumer(
        {"kafka.bootstrap.servers": cluster.bootstrap},
        isolation_level="read_committed" if committed else "read_uncommitted",
    )
    parts = [TopicPartition(topic, p) for p in c.partitions_for_topic(topic) or ()]
    c.assign(parts)
    c.seek_to_beginning(*parts)
    ends, out = c.end_offsets(parts), []
    deadline = time.monotonic() + 120
    while any(c.position(tp) < ends[tp] for tp in parts) and time.monotonic() < deadline:
        for records in c.poll(500).values():
            out += [r.value for r in records if r.value is not None]
    c.close()
    return out


def _caught_up(cluster: Cluster, quiet_s: float = 20, timeout_s: float = 300) -> int:
    """Wait until the decisions topic stops growing for ``quiet_s``; its committed count."""
    last, since, deadline = -1, time.monotonic(), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        n = len(_read(cluster, DECISIONS, True))
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
        time.sleep(5)
    return last


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=150, help="InitProducerIds a second (150)")
    parser.add_argument("--seconds", type=float, default=60, help="the flood's length (60)")
    parser.add_argument("--version", default=None, help="Apache Kafka version (the default broker's)")
    args = parser.parse_args()
    from harness.plugin import plugin_jar
    from kafka.admin import NewTopic

    from pidquota.actuate.plugin_state import ensure_inits_topic
    from pidquota.store.kafka import admin

    with tempfile.TemporaryDirectory(prefix="pidquota-plugin-once-") as tmp:
        tmp = Path(tmp)
        log4j2 = request_log_at_warn(tmp, args.version)  # as Kafka ships it
        cluster = Cluster(
            tmp / "kafka", size=3, plugin=plugin_jar(), kafka_version=args.version, log4j2=log4j2,
            users={"admin": "admin-secret", USER: f"{USER}-secret"},
        )  # fmt: skip
        cluster.start()
        proc = None
        try:
            options = {"kafka.bootstrap.servers": cluster.bootstrap}
            a = admin(options)
            a.create_topics([NewTopic(DECISIONS, 3, 3)])
            a.close()
            ensure_inits_topic(options, INITS, 15_000, "User:ANONYMOUS")
            time.sleep(7)  # every plug-in sees its topic
            proc = _run(cluster, tmp)
            time.sleep(30)  # Spark up, its first batch planned
            granted = multiprocessing.Manager().dict()
            flooding = multiprocessing.get_context("fork").Process(
                target=flood,
                args=(
                    cluster.sasl_bootstrap,
                    cluster.users[USER],
                    [n.node_id for n in cluster.nodes],
                    args.rate,
                    args.seconds,
                    granted,
                ),  # fmt: skip
            )
            flooding.start()
            t0 = time.monotonic()
            time.sleep(args.seconds / 4)
            os.killpg(proc.pid, signal.SIGKILL)  # the run and Spark's JVM, as a crash
            proc.wait(30)
            print(f"killed the run (-9) at {time.monotonic() - t0:.0f} s; started again", flush=True)
            proc = _run(cluster, tmp)
            time.sleep(max(0.0, args.seconds / 2 - (time.monotonic() - t0)))
            lost = cluster.nodes[1]
            cluster.kill(lost)
            print(f"killed broker {lost.node_id} (-9) at {time.monotonic() - t0:.0f} s", flush=True)
            time.sleep(10)
            cluster.start_node(lost)
            print(f"started broker {lost.node_id} again at {time.monotonic() - t0:.0f} s", flush=True)
            flooding.join(args.seconds + 120)
            decided = _caught_up(cluster)
            print(f"the flood ended; the run caught up: {decided:,} committed records", flush=True)
            _report(cluster, dict(granted))
        finally:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
                proc.wait(120)
            cluster.stop()


def _report(cluster: Cluster, granted: dict) -> None:
    from pidquota.formats.plugin_inits import synthetic_pid

    lines = [json.loads(line) for value in _read(cluster, INITS, False) for line in value.splitlines()]
    times = Counter((i["broker"], i["run"], i["seq"]) for i in lines)
    by_run: dict[tuple, set] = {}
    for broker, run, seq in times:
        by_run.setdefault((broker, run), set()).add(seq)
    published = {i["broker"]: 0 for i in lines}
    for (broker, _), seqs in by_run.items():
        published[broker] += len(seqs)
    pids = {synthetic_pid(i) for i in lines if i["outcome"] == "granted" and i["principal"] == f"User:{USER}"}
    decisions = [json.loads(v) for v in _read(cluster, DECISIONS, True)]
    decided = Counter(d["producer_id"] for d in decisions if d.get("kind", "decision") == "decision")
    print(
        "| broker | granted (the flood's count) | published (distinct) | lines sent twice | runs | gaps in seq |"
    )
    print("|---|---|---|---|---|---|")
    for broker in sorted(published):
        runs = [seqs for (b, _), seqs in by_run.items() if b == broker]
        twice = sum(n - 1 for (b, _, _), n in times.items() if b == broker and n > 1)
        gaps = sum(max(s) + 1 - len(s) for s in runs)
        print(
            f"| {broker} | {granted.get(broker, 0):,} | {published[broker]:,} | {twice} | {len(runs)} | {gaps} |"
        )
    once = sum(1 for p in pids if decided.get(p) == 1)
    twice = sum(1 for p in pids if decided.get(p, 0) > 1)
    lost = sum(1 for p in pids if p not in decided)
    print(
        f"decisions (read_committed): {len(pids):,} granted PIDs published; decided once {once:,}, "
        f"more than once {twice}, never {lost}; decisions of no published init "
        f"{sum(1 for p in decided if p not in pids)}"
    )


if __name__ == "__main__":
    main()
