"""What the plug-in's sensing (publishing each InitProducerId it answers, issue 54) costs a
broker, side by side with the plug-in without it and with Kafka's own ``StandardAuthorizer``.

    python benchmarks/plugin_sensing.py [--pairs 4] [--version 4.1.1] [--flood 600] [--seconds 10]
                                        [--jit-scale 0.05] [--warm-sends-min 45]

Two fresh one-node brokers, one after the other, on both of the JVM's compilers as in production
(a minute's load first, to warm them; ``--warm-sends-min``: as many minutes of 20 inits a second
before it on the plug-in's broker, publishing, so that its sending code is compiled as in a broker
that has run that long), the request log at WARN as Kafka ships it and
``auto.create.topics.enable=false`` (else a producer's metadata request brings a deleted topic back):
Kafka's own ``StandardAuthorizer``, then pidquota's plug-in (its state topic holding a heartbeat
and another user's throttle, so it looks, as in a run). Each takes two loads, as a SASL/PLAIN
user that is not a super user (every request goes through the authorizer), after a warm-up:

- **normal mix**: Kafka's ``ProducerPerformance`` at a fixed 20,000 records/s of 100 bytes
  (acks=all), and 20 new idempotent PIDs a second beside it;
- **init flood**: ``--flood`` InitProducerIds a second (pipelined on one connection, as a crash
  loop's inits arrive at a broker: each one a new PID), with ``ProducerPerformance`` at 5,000
  records/s beside it.

Each load runs in ``--pairs`` pairs of ``--seconds`` phases. On the plug-in's broker a pair is
one phase with sensing off and one with it on, the first of them turning each pair: the plug-in
publishes only to a topic that exists, so deleting its inits topic turns sensing off in the same
broker process, and making it turns it on (each phase starts 7 s after, the plug-in's check
having seen it, and after ``--seconds`` of the same load unmeasured: a turn's own cost, a
producer made and its code compiled, is paid once in production, not each phase). Side by side in one JVM, the pair's ratio is free of what differs between two
brokers' runs (their JIT, their hour); the StandardAuthorizer's broker runs the same phases.

Prints each phase's broker CPU seconds (the process's ``/proc`` utime + stime), the share of its
JIT's compiler threads and of the plug-in's sensing threads in it (``jcmd PID Thread.print``), and
ProducerPerformance's p99 latency, then per load: sensing on / off (the geometric mean of the
pairs' ratios: the pairs take turns at going first, so a drift from one phase to the next
cancels), of the whole process and of the process less its compiler threads (their compiles come
and go between phases by more than the sensing costs, and a broker running for weeks has paid
them); the sensing threads' own CPU; the plug-in off / StandardAuthorizer (medians of their
phases); and the records published against the inits granted (none dropped).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # scripts.*
sys.path.insert(0, str(ROOT / "tests"))  # harness.plugin

from scripts.kafka_broker import Cluster, java_cmd, request_log_at_warn  # noqa: E402

USER = "bench"
INITS = "pidquota-plugin-inits"
BROKERS = ("StandardAuthorizer", "plug-in, sensing off", "plug-in, sensing on")
STATS = "io.pidquota:type=PidQuotaAuthorizer,broker=1"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


THREAD = re.compile(r'^"([^"]+)".*?\bcpu=([\d.]+)ms', re.M)


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each live thread of a JVM, from ``jcmd PID Thread.print`` (its ``cpu=``)."""
    out = subprocess.run(
        ["jcmd", str(pid), "Thread.print"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    threads = {m.group(1): float(m.group(2)) / 1000 for m in THREAD.finditer(out)}
    if not threads:
        raise RuntimeError(f"jcmd {pid} Thread.print showed no thread's cpu=:\n{out[-1500:]}")
    return threads


def _split(before: dict[str, float], after: dict[str, float]) -> tuple[float, float]:
    """A phase's CPU seconds of the JIT's compiler threads (a warm-up cost, which a broker running
    for weeks has paid: their compiles come and go from one phase to the next, several times the
    sensing's own cost) and of the plug-in's sensing threads (its publisher and its producer's)."""
    # a thread made anew under an old name (a producer remade) counts from 0, never below it
    grew = {name: max(cpu - before.get(name, 0.0), 0.0) for name, cpu in after.items()}
    jit = sum(cpu for name, cpu in grew.items() if "CompilerThread" in name)
    sensing = sum(cpu for name, cpu in grew.items() if name.endswith("-inits"))
    return jit, sensing


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


def _broker(tmp: Path, plugin: Path | None, version: str | None, jit_scale: float | None) -> Cluster:
    tmp.mkdir(parents=True, exist_ok=True)
    log4j2 = request_log_at_warn(tmp, version)  # as Kafka ships it
    cluster = Cluster(
        tmp / ("plugin" if plugin else "standard"),
        users={"admin": "admin-secret", USER: f"{USER}-secret", "other": "other-secret"},
        plugin=plugin, jmx=plugin is not None, kafka_version=version, log4j2=log4j2,
        c2=True,  # both compilers, as a production broker runs: the cost of code a broker runs hot
        # as production clusters often run: a deleted inits topic stays deleted (sensing off); its
        # files deleted at once, in the 7 s between phases, not a minute later inside one
        extra={"auto.create.topics.enable": "false", "file.delete.delay.ms": "0"},
        jvm_options=() if jit_scale is None else (f"-XX:CompileThresholdScaling={jit_scale:g}",),
    )  # fmt: skip
    cluster.start()
    from kafka.admin import NewTopic

    from pidquota.actuate.plugin_state import PluginState
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
    return cluster


def _sensing(cluster: Cluster, on: bool) -> None:
    """Sensing on (the inits topic made) or off (deleted), and the plug-in's next check passed."""
    from pidquota.actuate.plugin_state import ensure_inits_topic
    from pidquota.store.kafka import admin

    options = {"kafka.bootstrap.servers": cluster.bootstrap}
    if on:
        ensure_inits_topic(options, INITS, 15_000, "")
    else:
        a = admin(options)
        if INITS in a.list_topics():
            a.delete_topics([INITS])
        a.close()
    time.sleep(7)


def _load(cluster: Cluster, produce: int, inits: float, seconds: float) -> dict:
    pid = cluster.nodes[0].proc.pid
    published0 = _published(cluster)
    threads0, cpu0 = thread_cpu(pid), cpu_seconds(pid)
    perf = _perf(cluster, produce, seconds) if produce else None  # none: the inits alone
    granted = _inits(cluster, inits, seconds)
    p99 = _p99(perf) if perf else float("nan")
    cpu, threads = cpu_seconds(pid) - cpu0, thread_cpu(pid)
    jit, sensing = _split(threads0, threads)
    time.sleep(1)  # the last records' acks
    return {
        "cpu": cpu, "jit": jit, "sensing": sensing, "p99": p99, "granted": granted,
        "published": _published(cluster) - published0,
    }  # fmt: skip


def _published(cluster: Cluster) -> int:
    if cluster.plugin is None:
        return 0
    return int(cluster.jmx_value(cluster.nodes[0], STATS, "InitsPublished"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=4, help="pairs of phases per load and broker (4)")
    parser.add_argument("--version", default=None, help="Apache Kafka version (the default broker's)")
    parser.add_argument(
        "--flood", type=float, default=600, help="InitProducerIds a second in the flood (600)"
    )
    parser.add_argument("--seconds", type=float, default=10, help="each phase's length (10)")
    parser.add_argument(
        "--jit-scale",
        type=float,
        default=None,
        help="both brokers' -XX:CompileThresholdScaling: 0.05 compiles within this run what a broker "
        "runs twice a second (the plug-in's sends), which at Java's thresholds C2 compiles after "
        "about 40 minutes, past every phase here (default: Java's own)",
    )
    parser.add_argument(
        "--warm-sends-min",
        type=float,
        default=0,
        help="minutes of 20 inits a second, with nothing else, before the plug-in's warm-up: "
        "a send's code runs twice a second, and C2 compiles it at Java's thresholds after about "
        "40 minutes (default 0)",
    )
    args = parser.parse_args()
    from harness.plugin import plugin_jar

    loads = {"normal mix": (20_000, 20.0), "init flood": (5_000, args.flood)}
    got: dict[tuple[str, str], list[dict]] = {}
    pairs: dict[str, list[float]] = {load: [] for load in loads}
    steady: dict[str, list[float]] = {load: [] for load in loads}
    with tempfile.TemporaryDirectory(prefix="pidquota-plugin-sensing-") as tmp:
        for plugin in (None, plugin_jar()):
            cluster = _broker(Path(tmp), plugin, args.version, args.jit_scale)
            try:
                if plugin is not None:  # the warm-up publishes too: a producer made, its classes loaded
                    _sensing(cluster, True)
                if plugin is not None and args.warm_sends_min:  # the inits alone: sends, not gigabytes
                    _load(cluster, 0, 20, args.warm_sends_min * 60)
                _load(cluster, 20_000, 100, 60)  # warm-up: C2's JIT, the first segments
                for load, (produce, inits) in loads.items():
                    for k in range(args.pairs):
                        pair = _pair(cluster, load, produce, inits, k, args.seconds, got)
                        if plugin is not None:
                            pairs[load].append(pair[True]["cpu"] / pair[False]["cpu"])
                            steady[load].append(_steady(pair[True]) / _steady(pair[False]))
            finally:
                cluster.stop()
    _report(got, pairs, steady, loads, args)


def _pair(cluster: Cluster, load: str, produce: int, inits: float, k: int, seconds: float, got: dict) -> dict:
    """Pair ``k`` of a load's phases: sensing off and on (on first in every other pair) on the
    plug-in's broker, two like phases on the StandardAuthorizer's; each measured phase is recorded
    in ``got`` and printed. Returns the phases by ``on``."""
    pair = {}
    for on in (k % 2 == 0, k % 2 == 1):
        name = BROKERS[0] if cluster.plugin is None else BROKERS[2 if on else 1]
        if cluster.plugin is not None:
            _sensing(cluster, on)
        # unmeasured, the same load first: what a turn costs once (a producer made, its code
        # compiled, the plug-in's check seeing the topic) is not in the phase
        _load(cluster, produce, inits, seconds)
        m = pair[on] = _load(cluster, produce, inits, seconds)
        got.setdefault((load, name), []).append(m)
        print(
            f"  {load}, pair {k + 1}, {name}: broker CPU {m['cpu']:.2f} s (JIT {m['jit']:.2f}, "
            f"sensing threads {m['sensing']:.3f}), p99 {m['p99']:.0f} ms, "
            f"inits granted {m['granted']:,}, published {m['published']:,}",
            flush=True,
        )
    return pair


def _steady(m: dict) -> float:
    return m["cpu"] - m["jit"]


def _report(got: dict, pairs: dict, steady: dict, loads: dict, args) -> None:
    print(f"\n{args.pairs} pairs of {args.seconds:g} s phases a load:")
    for load, (produce, inits) in loads.items():
        phases = {n: got[(load, n)] for n in BROKERS}
        cpu = {n: statistics.median(m["cpu"] for m in ms) for n, ms in phases.items()}
        less = {n: statistics.median(_steady(m) for m in ms) for n, ms in phases.items()}
        p99 = {n: statistics.median(m["p99"] for m in ms) for n, ms in phases.items()}
        off, on = BROKERS[1], BROKERS[2]
        own = statistics.median(m["sensing"] for m in phases[on])
        granted = sum(m["granted"] for m in phases[on])
        published = sum(m["published"] for m in phases[on])
        print(
            f"{load} ({produce:,} records/s, {inits:g} inits/s):\n"
            f"  median broker CPU s (less its JIT's compiler threads): "
            + ", ".join(f"{n} {cpu[n]:.2f} ({less[n]:.2f})" for n in BROKERS)
            + f"\n  sensing on / off, geometric mean of the pairs: {_mean(pairs[load])}; "
            f"less the JIT's compiler threads {_mean(steady[load])}\n"
            f"  the sensing threads' own CPU: {own / args.seconds * 1000:.1f} ms a second, "
            f"{own / less[off]:.1%} of the broker's less its JIT (sensing off)\n"
            f"  plug-in off / StandardAuthorizer: {cpu[off] / cpu[BROKERS[0]]:.3f}x, "
            f"less the JIT {less[off] / less[BROKERS[0]]:.3f}x\n"
            f"  produce p99 ms: "
            + ", ".join(f"{n} {p99[n]:.0f}" for n in BROKERS)
            + f"; sensing on published {published:,} of {granted:,} inits granted"
        )


def _mean(ratios: list[float]) -> str:
    return f"{statistics.geometric_mean(ratios):.3f}x ({', '.join(f'{r:.3f}' for r in ratios)})"


if __name__ == "__main__":
    main()
