"""How fast the actuator acts and lets go, and what each action costs the cluster, on
Apache Kafka itself.

    python benchmarks/actuation.py [--users 8] [--loop 8] [--hold 5] [--mechanism M] [--brokers N]

Starts a fresh one-node broker (scripts/kafka_broker.py: SASL/PLAIN, the request log at
DEBUG) and ``pidquota run --follow`` on its request log with the actuator on
(``request-quota``), W = 60 s, every user's ``producer_ids_rate`` 5, a hold of ``--hold``
seconds and a trigger every second (``--trigger-ms``). Then, one user after another, a kafka-python crash loop
(a new producer per record) runs for ``--loop`` seconds and stops. Before them, once the run has
committed its first batch, a user ``warmup`` crash-loops for ``--warm-s`` seconds (15), over its
quota too, and is left out of the figures: a run's first over-quota users meet its first
batches' code generation and a JVM not yet compiled (0.6-0.9 s batches against 0.47), which a
run that has been up for minutes does not (issue 55: measure a stream, not a start). Its own
times are printed apart, as the cold start's; ``--warm-s 0`` measures from the first batch.

Per user, from the run's own outputs and the broker's request log:

- **act**: from the first THROTTLE decision's event time (the time the broker logged the
  init that went over the quota) to the ``apply`` action (wall clock, same machine);
- **undo**: from the throttle's end (the last THROTTLE decision's event time plus its
  ``throttle_time_ms``: when the bucket admits a new PID again) to the ``undo`` action,
  which includes the hold;
- **cost**: the requests the actuator's clients (client id ``pidquota``) sent the broker
  over the whole run, by API, per action; and whether they reached the controller (the
  broker forwards ALTER_CLIENT_QUOTAS to the KRaft controller, which writes it to the
  metadata log: ``ENVELOPE`` lines, or ``isForwarded``).

- **refuse** (``--mechanism broker-plugin``: the brokers run pidquota's plug-in): from the
  first over-quota init to the first InitProducerId a broker refused the user (error 31 in any
  node's request log, broker time).

``--input plugin-inits`` feeds the run from the plug-in's inits topic instead of the request log
(``kafka://.../pidquota-plugin-inits``, issue 54; the brokers run the plug-in): the first
refusal is then the first record of the user's that says ``refused`` (broker time too).

Prints p50 and p99 of act, undo (and refuse), and the requests per action.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # scripts.*

from pidquota.streaming.outputs.reader import read_output  # noqa: E402
from scripts.kafka_broker import Cluster  # noqa: E402

INITS = "pidquota-plugin-inits"
QUOTA = 5  # new PIDs per W
WINDOW_S = 60


def crash_loop(cluster: Cluster, user: str, seconds: float) -> int:
    """A kafka-python crash loop as ``user`` for ``seconds``: a new producer per record."""
    from kafka import KafkaProducer

    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        p = KafkaProducer(
            bootstrap_servers=cluster.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username=user,
            sasl_plain_password=cluster.users[user],
            enable_idempotence=True,
            client_id=f"{user}-app",
            max_block_ms=5000,
        )
        try:
            p.send("bench", b"x").get(timeout=10)
            n += 1
        except Exception:  # a throttled client goes on, as a crash loop does
            pass
        finally:
            p.close(timeout=1)
    return n


def _requests(log: Path) -> tuple[Counter, Counter]:
    """The requests from client id ``pidquota`` by API name, as the broker received them, and
    as the controller received them forwarded (a combined node logs both)."""
    by_api, forwarded = Counter(), Counter()
    for line in log.read_text(errors="replace").splitlines():
        start = line.find("Completed request:")
        if start < 0:
            continue
        try:
            body = json.loads(line[start + len("Completed request:") : line.rindex("}") + 1])
        except ValueError:
            continue
        header = body.get("requestHeader") or {}
        if header.get("clientId") == "pidquota":
            (forwarded if body.get("isForwarded") else by_api)[header.get("requestApiKeyName")] += 1
    return by_api, forwarded


def _first_refused(logs: list[Path]) -> dict[str, int]:
    """Per principal, the broker time (ms) of its first InitProducerId the brokers refused
    (CLUSTER_AUTHORIZATION_FAILED, 31: the plug-in), from every node's request log."""
    import calendar

    first: dict[str, int] = {}
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if '"requestApiKeyName":"INIT_PRODUCER_ID"' not in line:
                continue
            body = json.loads(line[line.index("{") : line.rindex("}") + 1])
            if (body.get("response") or {}).get("errorCode") != 31:
                continue
            stamp = line[1:24]  # "2026-11-28 10:25:31,123", the broker's local time
            ms = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) * 1000 + int(stamp[20:23])
            ms -= _utc_offset_s() * 1000
            who = body.get("principal")
            first[who] = min(first.get(who, ms), ms)
    return first


def _first_refused_published(cluster: Cluster, lags: list[tuple[float, bool]]) -> dict[str, int]:
    """Per principal, the broker time (ms) of its first InitProducerId refused, from the plug-in's
    own records in its inits topic (every broker publishes there); in ``lags``, each init's wait in
    the plug-in (its record's timestamp, when the plug-in sent it, less the init's ``at_ms``, s)
    and whether it was granted, of the measured users' inits."""
    from kafka import TopicPartition

    from pidquota.store.kafka import consumer

    c = consumer({"kafka.bootstrap.servers": cluster.bootstrap})
    parts = [TopicPartition(INITS, p) for p in c.partitions_for_topic(INITS) or ()]
    c.assign(parts)
    c.seek_to_beginning(*parts)
    ends, first = c.end_offsets(parts), {}
    while any(c.position(tp) < ends[tp] for tp in parts):
        for records in c.poll(500).values():
            for r in records:
                for line in r.value.splitlines():  # a record holds a line per init
                    init = json.loads(line)
                    if init["principal"] not in ("User:warmup", "User:steady"):  # the measured users'
                        lags.append(((r.timestamp - init["at_ms"]) / 1000, init.get("outcome") == "granted"))
                    if init.get("outcome") == "refused":
                        who = init["principal"]
                        first[who] = min(first.get(who, init["at_ms"]), init["at_ms"])
    c.close()
    return first


def _utc_offset_s() -> int:
    return -time.timezone if time.localtime().tm_isdst == 0 else -time.altzone


def _refusals(out: Path, users: list[str], refused: dict[str, int]) -> list[float]:
    """Per user, from its first over-quota init (the first THROTTLE decision's event time) to
    the first InitProducerId a broker refused it."""
    decisions = read_output(out, "decisions")
    gaps = []
    for user in users:
        mine = decisions[(decisions.principal == f"User:{user}") & (decisions.verdict == "THROTTLE")]
        if not mine.empty and f"User:{user}" in refused:
            gaps.append((refused[f"User:{user}"] - mine.timestamp.min()) / 1000)
        else:
            print(f"  {user}: throttled {len(mine)}, refused {f'User:{user}' in refused}: not measured")
    return gaps


def _batch_seconds(checkpoint: Path) -> list[float]:
    """Each micro-batch's time, in batch order, from Spark's checkpoint: its offsets written
    (planned) to its commit written (its outputs and the actuator's work done), s."""
    took = []
    for commit in sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda c: int(c.name)):
        planned = checkpoint / "offsets" / commit.name
        if planned.exists():
            took.append(commit.stat().st_mtime - planned.stat().st_mtime)
    return took


def _timings(out: Path, users: list[str]) -> tuple[list[float], list[float]]:
    decisions, actions = read_output(out, "decisions"), read_output(out, "actions")
    act, undo = [], []
    for user in users:
        mine = decisions[(decisions.principal == f"User:{user}") & (decisions.verdict == "THROTTLE")]
        done = actions[actions.principal == f"User:{user}"]
        applied, undone = done[done.action == "apply"], done[done.action == "undo"]
        if mine.empty or applied.empty:
            print(f"  {user}: throttled {len(mine)}, applied {len(applied)}: not measured", flush=True)
            continue
        act.append((applied.at_ms.min() - mine.timestamp.min()) / 1000)
        last = mine.sort_values("timestamp").iloc[-1]
        if not undone.empty:
            undo.append((undone.at_ms.min() - (last.timestamp + last.throttle_time_ms)) / 1000)
    return act, undo


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=8, help="crash-looping users, one after another (8)")
    parser.add_argument("--loop", type=float, default=8.0, help="seconds each crash loop runs (8)")
    parser.add_argument(
        "--warm-s", type=float, default=15.0,
        help="seconds the user 'warmup' crash-loops before the measured users, left out of the figures (15)",
    )  # fmt: skip
    parser.add_argument("--hold", type=float, default=5.0, help="pidquota.actuator.hold.ms, in seconds (5)")
    parser.add_argument(
        "--mechanism", default="request-quota", help="pidquota.actuator.mechanism (request-quota)"
    )
    parser.add_argument(
        "--trigger-ms", type=int, default=1000, help="the run's pidquota.trigger.interval.ms (1000)"
    )
    parser.add_argument("--brokers", type=int, default=1, help="KRaft nodes, each broker and controller (1)")
    parser.add_argument(
        "--input", choices=("kafka-request-log", "plugin-inits"), default="kafka-request-log",
        help="what the run reads: the brokers' request log, or the plug-in's inits topic",
    )  # fmt: skip
    args = parser.parse_args()
    users = [f"loop{i}" for i in range(args.users)]
    plugin = None
    if args.input == "plugin-inits" and args.mechanism != "broker-plugin":
        parser.error("--input plugin-inits: the brokers run the plug-in; give --mechanism broker-plugin")
    if args.mechanism == "broker-plugin":  # the brokers run pidquota's plug-in (built if stale)
        sys.path.insert(0, str(ROOT / "tests"))
        from harness.plugin import plugin_jar

        plugin = plugin_jar()
    with tempfile.TemporaryDirectory(prefix="pidquota-actuation-") as tmp:
        tmp = Path(tmp)
        cluster = Cluster(
            tmp / "kafka",
            size=args.brokers,
            users={u: f"{u}-secret" for u in ("admin", "steady", "warmup", *users)},
            plugin=plugin,
        )
        cluster.start()
        proc = None
        try:
            from kafka.admin import NewTopic

            from pidquota.store.kafka import admin

            a = admin({"kafka.bootstrap.servers": cluster.bootstrap})
            a.create_topics([NewTopic("bench", 1, 1)])
            a.close()
            quotas = tmp / "quotas.json"
            quotas.write_text(json.dumps({"users": {"<default>": {"producer_ids_rate": QUOTA}}}))
            out = tmp / "out"
            if args.input == "plugin-inits":
                source = [f"kafka://{cluster.bootstrap}/{INITS}", "--input-format", "plugin-inits"]
            else:
                logs = cluster.nodes[0].logs if args.brokers == 1 else cluster.logs
                source = [str(logs), "--input-format", "kafka-request-log", "--follow"]
            cmd = [
                sys.executable, "-m", "pidquota", "run", "--input", *source, "--output", str(out),
                "--quotas", str(quotas), "--set", f"producer.id.quota.window.size.seconds={WINDOW_S}",
                "--set", f"pidquota.trigger.interval.ms={args.trigger_ms}", "--set", "pidquota.actuator=on",
                "--set", f"pidquota.actuator.bootstrap={cluster.bootstrap}",
                "--set", f"pidquota.actuator.hold.ms={int(args.hold * 1000)}",
                "--set", f"pidquota.actuator.mechanism={args.mechanism}",
                # the PLAINTEXT listener's principal, a super user: the plug-in's state topic is guarded for it
                "--set", "pidquota.actuator.principal=User:ANONYMOUS",
            ]  # fmt: skip
            log = open(tmp / "run.log", "w")  # noqa: SIM115
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + 180
            while not list((out / "metrics").glob("*.jsonl")) and time.monotonic() < deadline:
                crash_loop(cluster, "steady", 1)  # something to decide, so the first batch comes
                time.sleep(1)
            if args.warm_s > 0:
                n = crash_loop(cluster, "warmup", args.warm_s)
                print(f"  warmup: {n} records from as many producers (left out of the figures)", flush=True)
                time.sleep(3)
            for user in users:
                n = crash_loop(cluster, user, args.loop)
                print(f"  {user}: {n} records from as many producers", flush=True)
            time.sleep(WINDOW_S / QUOTA * 2 + args.hold + 10)  # every throttle ends, every hold passes
        finally:
            if proc is not None:
                os.killpg(proc.pid, signal.SIGINT)  # the run's end lifts what is still held
                proc.wait(120)
            act, undo = _timings(tmp / "out", users)
            cold_act, _ = _timings(tmp / "out", ["warmup"]) if args.warm_s > 0 else ([], [])
            batches = _batch_seconds(tmp / "out" / "_checkpoint")
            logs = [n.request_log for n in cluster.nodes]
            lags: list[tuple[float, bool]] = []
            cold_refuse: list[float] = []
            if plugin is None:
                refuse = []
            else:
                firsts = (
                    _first_refused(logs)
                    if args.input != "plugin-inits"
                    else _first_refused_published(cluster, lags)
                )
                refuse = _refusals(tmp / "out", users, firsts)
                cold_refuse = _refusals(tmp / "out", ["warmup"], firsts) if args.warm_s > 0 else []
            by_api, forwarded = _requests(cluster.nodes[0].request_log)
            actions = read_output(tmp / "out", "actions")
            cluster.stop()
    _print_timings(args, act, undo, refuse, (cold_act, cold_refuse), lags, batches)
    _print_costs(actions, by_api, forwarded)


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def _print_timings(args, act, undo, refuse, cold, lags, batches) -> None:
    """act, undo, refuse (p50, p99, each), the warm-up user's own, the plug-in's waits and the batches."""
    cold_act, cold_refuse = cold
    print(
        f"act:  first over-quota init -> apply, {len(act)} users: p50 {pct(act, 50):.1f} s, p99 {pct(act, 99):.1f} s; "
        f"each: {', '.join(f'{a:.2f}' for a in act)}"
    )
    print(
        f"undo: throttle end -> undo (hold {args.hold:g} s), {len(undo)} users: "
        f"p50 {pct(undo, 50):.1f} s, p99 {pct(undo, 99):.1f} s"
    )
    if refuse:
        print(
            f"refuse: first over-quota init -> first InitProducerId a broker refused, {len(refuse)} users: "
            f"p50 {pct(refuse, 50):.1f} s, p99 {pct(refuse, 99):.1f} s ({args.brokers} broker(s), "
            f"the run reading {args.input}); each: {', '.join(f'{r:.2f}' for r in refuse)}"
        )
    if cold_act:
        also = f", refuse {cold_refuse[0]:.2f} s" if cold_refuse else ""
        print(f"warmup (the run's first over-quota user, left out above): act {cold_act[0]:.2f} s{also}")
    if lags:
        waits = [w for w, _ in lags]
        granted = [w for w, ok in lags if ok]
        print(
            f"published: an init's wait in the plug-in before it is sent, {len(waits):,} inits: "
            f"p50 {pct(waits, 50):.2f} s, p99 {pct(waits, 99):.2f} s; the {len(granted):,} granted: "
            f"p50 {pct(granted, 50):.2f} s, p99 {pct(granted, 99):.2f} s"
        )
    print(
        f"batches: {len(batches)}, from planned to committed p50 {pct(batches, 50):.2f} s, "
        f"p99 {pct(batches, 99):.2f} s (the trigger every {args.trigger_ms / 1000:g} s); the first five: "
        f"{', '.join(f'{b:.2f}' for b in batches[:5])}"
    )


def _print_costs(actions, by_api: Counter, forwarded: Counter) -> None:
    """The actions and what the actuator's clients asked of the cluster per quota change."""
    counted = Counter(actions.action)
    changes = counted["apply"] + counted["undo"]
    print(f"actions: {dict(counted)}; quota changes (apply + undo): {changes}")
    per = {api: round(n / max(changes, 1), 1) for api, n in by_api.most_common()}
    print(f"requests from the actuator's clients per change, by API: {per}")
    fwd = {api: round(n / max(changes, 1), 1) for api, n in forwarded.most_common()}
    print(f"of them forwarded to the KRaft controller, per change: {fwd}")


if __name__ == "__main__":
    main()
