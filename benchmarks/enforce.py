"""What each of Kafka's own controls does to a PID flood, measured on Apache Kafka itself.

    python benchmarks/enforce.py [--phase 30] [--mechanisms none,request-quota,deny-writes,...]

Starts a fresh one-node broker (scripts/kafka_broker.py: SASL/PLAIN users, the
StandardAuthorizer, ``allow.everyone.if.no.acl.found=true``, the request log at DEBUG) and
runs, as real clients on its SASL listener, side by side:

- as ``User:crash-loop``, the offender: a kafka-python crash loop (``crash-py``), a
  librdkafka crash loop (``crash-rd``), a producer per batch of 10 (``per-batch``), a
  producer that starts anew on each error (``per-error``: every 20th record is too large
  for its topic), and a steady kafka-python producer (``steady-same``);
- as ``User:steady``, a well-behaved user: a steady kafka-python producer
  (``steady-other``) and a rolling deploy, a new producer every 2 s (``deploy-other``),
  whose PIDs must keep coming.

Each client runs in a process of its own. The offender's kafka-python loops (``crash-py``,
``per-batch``, ``per-error``) connect from an address of their own, ``127.0.0.2`` (their
sockets are bound to it); every other client connects from ``127.0.0.1``, which the
offender therefore shares with the well-behaved user.

For each mechanism: ``--phase`` seconds before, then the actuator applies it to the
offender (``actuate/``, on the real controls), ``--phase`` seconds during, then it lifts it
and checks the controls are as before. Prints, per mechanism and client, the PIDs the broker
granted per minute (its request log: INIT_PRODUCER_ID completions with a producer id) and
the steady producers' acknowledged records per second, before and during; then the table as
markdown for docs/enforcing.md.

Mechanisms: ``none``; ``broker-plugin`` (pidquota's broker plug-in, ``plugin/``: the brokers
run it as their authorizer, and the actuator writes the offender's throttle to its state topic,
with the heartbeat it obeys; it refuses the offender's InitProducerId and nothing else);
``request-quota`` (``request_percentage`` 1 on the user);
``deny-writes`` (the circuit breaker: DENY IDEMPOTENT_WRITE on the cluster and WRITE on
every topic and transactional id); ``deny-new-pids`` (DENY IDEMPOTENT_WRITE on the cluster
and WRITE on the topic ``hardcode``: see docs/enforcing.md); ``connection-rate``
(``connection_creation_rate`` 1/s on every client's address, both loopback addresses);
``request-quota-0.1`` (``request_percentage`` 0.1); ``request-quota+connection-rate``
(pidquota's mechanism of that name: the quota, and the connection rate on each address the
offender has to itself, found as a run finds it, from the request log's inits before: here
127.0.0.2 alone); ``closed-loop``: that mechanism with pidquota's closed loop
(``actuate/escalation.py``) driven as a run drives it, the offender's quota 5 new PIDs a
minute, each measure ``--settle`` seconds, deny-writes as its last step with
``--strict-acls``; its steps and the offender's PIDs per minute over the last third of the
phase (the floor it reached) are printed too; ``broker-plugin-narrowed``: the plug-in through
a run's actuator, narrowed to the flooding client ids (``pidquota.actuator.plugin.narrow``)
with the closed loop's whole-user step. ``deploy-same`` is the offender's own rolling deploy
(a new producer every 2 s): the application a narrowed throttle spares.

Each phase also reads the brokers' ``ProducerIdCount`` (KIP-847, the producer ids they keep
in memory) with Kafka's own JmxTool at its start and end: its growth per minute, before and
during. ``--brokers 3`` runs three KRaft nodes.

``--strict-acls``: the cluster grants nothing by default (``allow.everyone.if.no.acl.found=false``)
and each user has ALLOW ACLs for WRITE on its topics and IDEMPOTENT_WRITE on the cluster.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # scripts.*
sys.path.insert(0, str(ROOT / "tests"))  # harness.clients: librdkafka

from pidquota.actuate.actuator import Actuator  # noqa: E402
from pidquota.actuate.addresses import AddressBook  # noqa: E402
from pidquota.actuate.controls import AclBinding, Controls, QuotaKey  # noqa: E402
from pidquota.actuate.journal import Journal  # noqa: E402
from pidquota.actuate.mechanisms import (  # noqa: E402
    CLUSTER,
    Mechanism,
    broker_plugin,
    deny_writes,
    quota_and_connections,
    request_quota,
)
from pidquota.actuate.plugin_state import PluginState  # noqa: E402
from pidquota.actuate.policy import Rails  # noqa: E402
from scripts.kafka_broker import Cluster  # noqa: E402

OFFENDER, STEADY = "crash-loop", "steady"
CLIENTS = (
    "crash-py",
    "crash-rd",
    "per-batch",
    "per-error",
    "deploy-same",
    "deploy-other",
    "steady-same",
    "steady-other",
)
PID_CLIENTS, STEADY_CLIENTS = CLIENTS[:6], CLIENTS[6:]
RUNNING = list(CLIENTS)  # the clients started (--clients); the others show "-"
OWN_ADDRESS = "127.0.0.2"  # where the offender's kafka-python loops connect from
ON_OWN_ADDRESS = ("crash-py", "per-batch", "per-error")


def mechanisms() -> dict[str, Mechanism | None]:
    def deny_new_pids(principal, _):
        return [
            (AclBinding(principal, "IDEMPOTENT_WRITE", "DENY", "CLUSTER", CLUSTER), True),
            (AclBinding(principal, "WRITE", "DENY", "TOPIC", "hardcode"), True),
        ]

    return {
        "none": None,
        "broker-plugin": broker_plugin(),
        "request-quota": request_quota(1.0),
        "deny-writes": deny_writes(),
        "deny-new-pids": Mechanism("deny-new-pids", deny_new_pids),
        "connection-rate": Mechanism(
            "connection-rate",
            lambda p, _: [
                (QuotaKey("ip", a, "connection_creation_rate"), 1.0) for a in ("127.0.0.1", OWN_ADDRESS)
            ],
        ),
        "request-quota-0.1": request_quota(0.1),
        "request-quota+connection-rate": quota_and_connections(1.0, 1.0),
        "closed-loop": CLOSED_LOOP,
        "broker-plugin-narrowed": NARROWED,
    }


CLOSED_LOOP = Mechanism("closed-loop", lambda p, a: quota_and_connections(1.0, 1.0).controls(p, a))
NARROWED = Mechanism("broker-plugin-narrowed", lambda p, _: broker_plugin().controls(p))
LOOPED = {"closed-loop": "request-quota+connection-rate", "broker-plugin-narrowed": "broker-plugin"}


class Loop:
    """pidquota's closed loop as a run drives it (``actuate.runner.BatchActuator``, with the
    quota ``--quota`` new PIDs per minute for the offender, 5 by default): each second, the offender's grants of the
    second before last, read from the tail of the request log, as a batch's metrics row, its
    throttled decisions by client id and its addresses."""

    def __init__(
        self, cluster: Cluster, log: Path, settle_s: float, deny: bool, mechanism: str, quota: float
    ):
        import threading

        from pidquota.actuate.runner import BatchActuator, cluster_options
        from pidquota.conf.loader import load

        config = load(
            None,
            {
                "pidquota.actuator": "on",
                "pidquota.actuator.mechanism": mechanism,
                "pidquota.actuator.journal.topic": f"bench-journal-looped-{mechanism.replace('+', '-')}",
                "pidquota.actuator.escalation.settle.ms": str(int(settle_s * 1000)),
                "pidquota.actuator.escalation.deny.writes": str(deny).lower(),
                "producer.id.quota.window.size.seconds": "60",
                # the PLAINTEXT listener's principal, a super user: the plug-in's state topic is guarded for it
                "pidquota.actuator.principal": "User:ANONYMOUS",
            },
        )
        self.act = BatchActuator(config, cluster_options(config, cluster.bootstrap))
        self.log, self.at, self.pending, self.quota = log, log.stat().st_size, [], quota
        self.steps: list[dict] = []
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self, t0: float) -> None:
        self.t0 = t0
        self.act.start()
        self.thread.start()

    def _run(self) -> None:
        from pidquota.formats.request_log import connection_ends

        tick = int(time.time()) + 1
        while not self.stop_flag.wait(max(0.0, tick - time.time())):
            self.pending += self._tail()
            offender = f"User:{OFFENDER}"
            second, keep, clients, addresses = tick - 2, [], Counter(), set()
            for at, body in self.pending:
                if at >= second + 1:
                    keep.append((at, body))
                elif at == second:  # every user's grants, as a run's decisions name their addresses
                    who = body.get("principal")
                    addresses.add((who, connection_ends(body.get("connection"))[1], who == offender))
                    if who == offender:
                        clients[body["requestHeader"].get("clientId") or ""] += 1
            self.pending = keep
            n = sum(clients.values())
            row = {
                "principal": offender,
                "timestamp": 1,
                "quota": self.quota,
                "tokens": 0.0,
                "admitted": 0,
                "throttled": n,
            }
            rows = self.act([row], sorted(addresses), [(offender, c, k) for c, k in clients.items()])
            for r in rows:
                self.steps.append(
                    {
                        "t": round(time.time() - self.t0, 1),
                        "action": r.action,
                        "control": r.control,
                        "note": r.note,
                    }
                )
                print(f"  loop +{self.steps[-1]['t']} s: {r.action} {r.control} {r.note}", flush=True)
            tick += 1

    def _tail(self) -> list[tuple[int, dict]]:
        if self.log.stat().st_size < self.at:  # rolled (every hour): the new file from its start
            self.at = 0
        with open(self.log, "rb") as f:
            f.seek(self.at)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.at += end
        out = []
        for line in data[:end].decode(errors="replace").splitlines():
            if not _INIT.search(line):
                continue
            body = json.loads(line[line.index("{") : line.rindex("}") + 1])
            if (body.get("response") or {}).get("producerId", -1) >= 0:
                out.append((int(time.mktime(time.strptime(line[1:20], "%Y-%m-%d %H:%M:%S"))), body))
        return out

    def stop(self) -> bool:
        """Lift it all; whether every control is as before (the journal empty, no step left)."""
        self.stop_flag.set()
        self.thread.join(10)
        self.act.stop()
        exact = not self.act.actuator.entries
        self.act.close()
        return exact


def _bind_to(address: str) -> None:
    """This process's IPv4 sockets connect from ``address`` (kafka-python's connections)."""
    import socket

    def bound(connect):
        def call(self, where):
            if self.family == socket.AF_INET and self.getsockname()[1] == 0:
                self.bind((address, 0))
            return connect(self, where)

        return call

    socket.socket.connect = bound(socket.socket.connect)
    socket.socket.connect_ex = bound(socket.socket.connect_ex)


class Load:
    """The clients, each in a process of its own (so that one client's retries cannot slow
    another's Python), until :meth:`stop`; ``acked`` counts each steady producer's
    acknowledged records, ``errors`` each client's errors."""

    def __init__(self, cluster: Cluster, extra: tuple[str, ...] = ()):
        """``extra``: more clients, each a method ``_<name>`` of a subclass."""
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        self.cluster, self.stop_flag = cluster, ctx.Event()
        self._acked = {c: ctx.Value("l", 0) for c in (*CLIENTS, *extra)}
        self._errors = {c: ctx.Value("l", 0) for c in (*CLIENTS, *extra)}
        self.procs = [ctx.Process(target=self._guard, args=(c,), daemon=True) for c in (*RUNNING, *extra)]

    @property
    def acked(self) -> Counter:
        return Counter({c: v.value for c, v in self._acked.items()})

    @property
    def errors(self) -> Counter:
        return Counter({c: v.value for c, v in self._errors.items() if v.value})

    def start(self) -> Load:
        for p in self.procs:
            p.start()
        return self

    def stop(self) -> None:
        self.stop_flag.set()
        for p in self.procs:
            p.join(60)
            if p.is_alive():
                p.kill()

    def _options(self, user: str) -> dict:
        return {
            "kafka.bootstrap.servers": self.cluster.sasl_bootstrap,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": user,
            "kafka.sasl.password": self.cluster.users[user],
        }

    def _kafka_python(self, user: str, client: str, **extra):
        from pidquota.store.kafka import producer

        return producer(self._options(user), client_id=client, linger_ms=5, **extra)

    def _guard(self, client: str) -> None:
        if client in ON_OWN_ADDRESS:
            _bind_to(OWN_ADDRESS)
        while not self.stop_flag.is_set():
            try:
                getattr(self, "_" + client.replace("-", "_"))(client)
            except Exception:  # a refused or throttled client starts again, as an application would
                with self._errors[client].get_lock():
                    self._errors[client].value += 1
                time.sleep(0.05)

    def _once(self, producer, topic: str, n: int, size: int = 10) -> None:
        try:
            for _ in range(n):
                producer.send(topic, value=b"x" * size)
            producer.flush()
        finally:
            producer.close()

    def _crash_py(self, client: str) -> None:
        self._once(self._kafka_python(OFFENDER, client), "bench", 1)

    def _crash_rd(self, client: str) -> None:
        from harness.clients import ConfluentProducer

        users = self.cluster.users
        p = ConfluentProducer(
            self.cluster.sasl_bootstrap,
            **{
                "client.id": client,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": OFFENDER,
                "sasl.password": users[OFFENDER],
                "message.timeout.ms": 10_000,
            },
        )
        self._once(p, "bench", 1)

    def _per_batch(self, client: str) -> None:
        self._once(self._kafka_python(OFFENDER, client), "bench", 10)

    def _per_error(self, client: str) -> None:
        p = self._kafka_python(OFFENDER, client)  # a too-large record is not retried
        try:
            for i in range(1, 10_000):
                if self.stop_flag.is_set():
                    return
                p.send("small", value=b"x" * (2000 if i % 20 == 0 else 10)).get(timeout=10)
        finally:
            p.close()

    def _steady(self, user: str, client: str) -> None:
        p = self._kafka_python(user, client)
        try:
            while not self.stop_flag.is_set():
                p.send("bench", value=b"y" * 10).get(timeout=10)
                with self._acked[client].get_lock():
                    self._acked[client].value += 1
                time.sleep(0.01)
        finally:
            p.close()

    def _deploy_other(self, client: str) -> None:
        """A well-behaved user's rolling deploy: a new producer every 2 s (its PIDs must go on)."""
        self._once(self._kafka_python(STEADY, client), "bench", 5)
        time.sleep(2)

    def _deploy_same(self, client: str) -> None:
        """The offender's own rolling deploy, another application of the same user."""
        self._once(self._kafka_python(OFFENDER, client), "bench", 5)
        time.sleep(2)

    def _steady_same(self, client: str) -> None:
        self._steady(OFFENDER, client)

    def _steady_other(self, client: str) -> None:
        self._steady(STEADY, client)


_INIT = re.compile(r'"requestApiKeyName":"INIT_PRODUCER_ID"')


def granted(log: Path, since: float, until: float, book: AddressBook | None = None) -> Counter:
    """PIDs granted per client id between two wall-clock times (s), from the request log;
    each grant's (principal, client address) goes to ``book`` too, the offender's as
    throttled (what a run's decisions would tell the actuator)."""
    from pidquota.formats.request_log import connection_ends

    out: Counter = Counter()
    # the log rolls every hour (docker/kafka/log4j*.properties): the rolled files too, oldest first
    rolled = sorted(p for p in log.parent.glob(log.name + ".*"))
    text = "".join(p.read_text(errors="replace") for p in [*rolled, log] if p.exists())
    for line in text.splitlines():
        if not _INIT.search(line):
            continue
        at = time.mktime(
            time.strptime(line[1:20], "%Y-%m-%d %H:%M:%S")
        )  # the broker's local time, to the second
        if not since <= at < until:
            continue
        body = json.loads(line[line.index("{") : line.rindex("}") + 1])
        pid = (body.get("response") or {}).get("producerId", -1)
        if pid >= 0:
            out[body["requestHeader"].get("clientId") or "?"] += 1
            if book is not None:
                who = body.get("principal")
                book.add([(who, connection_ends(body.get("connection"))[1], who == f"User:{OFFENDER}")])
    return out


def phase(load: Load, seconds: float) -> tuple[float, float, Counter]:
    start, before = time.time(), load.acked
    time.sleep(seconds)
    return start, time.time(), load.acked - before


def measure(
    cluster: Cluster,
    name: str,
    mechanism: Mechanism | None,
    seconds: float,
    log: Path,
    settle_s: float = 10.0,
    deny: bool = False,
    quota: float = 5.0,
) -> dict:
    options = {"kafka.bootstrap.servers": cluster.bootstrap}
    controls = Controls(options)
    journal = Journal(options, "bench-journal-" + re.sub(r"[^A-Za-z0-9._-]", "-", name))
    journal.ensure()
    journal.claim()
    if name == "broker-plugin":  # the plug-in's state topic, and the heartbeat it obeys
        controls.state = PluginState(options, "pidquota-throttle-state")
        controls.state.ensure("")
        controls.state.start_heartbeat(60_000)
    load = Load(cluster).start()
    time.sleep(5)  # the clients connect
    count_before = cluster.producer_id_count() if cluster.jmx else None
    b0, b1, acked_before = phase(load, seconds)
    count_between = cluster.producer_id_count() if cluster.jmx else None
    actuator = None
    book = AddressBook()
    granted(log, b0, b1, book)
    offender = f"User:{OFFENDER}"
    addresses = book.exclusive(offender)
    loop = None
    if name in LOOPED:
        loop = Loop(cluster, log, settle_s, deny, LOOPED[name], quota)
        granted(log, b0, b1, loop.act.book)  # the addresses a run would have seen before
        loop.start(time.time())
    elif mechanism is not None:
        actuator = Actuator(mechanism, Rails(hold_ms=3_600_000, cap=10), controls, journal)
        rows = actuator({offender: int(time.time() * 1000) + 60_000}, {offender: addresses})
        print(f"  {name}: " + "; ".join(f"{r.action} {r.control}" for r in rows), flush=True)
    time.sleep(2)  # the brokers apply it
    count_from = cluster.producer_id_count() if cluster.jmx else None
    d0, d1, acked_during = phase(load, seconds)
    count_after = cluster.producer_id_count() if cluster.jmx else None
    exact = True
    if loop is not None:
        exact = loop.stop()
    if actuator is not None:
        before = {c: r.before for c, r in zip(mechanism.controls(offender, addresses), rows, strict=True)}
        actuator.lift_all()
        exact = all(controls.read(c) == was for (c, _), was in before.items())
    load.stop()
    controls.close()
    journal.close()
    g_before, g_during = granted(log, b0, b1), granted(log, d0, d1)
    per_min = lambda n, a, b: n * 60 / (b - a)  # noqa: E731
    return {
        "mechanism": name,
        "offender_own_addresses": list(addresses),
        "undone_exactly": exact,
        "pids_per_min": {
            c: (round(per_min(g_before[c], b0, b1)), round(per_min(g_during[c], d0, d1))) for c in PID_CLIENTS
        },
        "acked_per_s": {
            c: (round(acked_before[c] / (b1 - b0), 1), round(acked_during[c] / (d1 - d0), 1))
            for c in STEADY_CLIENTS
        },
        "errors": dict(load.errors),
        # the closed loop's steps, and what the offender's clients got in the last third of the
        # phase (after the steps): the floor the loop reached
        **(
            {}
            if loop is None
            else {
                "steps": loop.steps,
                "last_third_pids_per_min": {
                    c: round(per_min(n, d1 - (d1 - d0) / 3, d1))
                    for c, n in granted(log, d1 - (d1 - d0) / 3, d1).items()
                    if c in PID_CLIENTS
                },
            }
        ),
        # the brokers' ProducerIdCount growth per minute (KIP-847): the PIDs they keep in memory
        "producer_id_count_per_min": None
        if count_before is None
        else (
            round(per_min(count_between - count_before, b0, b1)),
            round(per_min(count_after - count_from, d0, d1)),
        ),
    }


def markdown(results: list[dict]) -> str:
    head = " | ".join(
        [
            "mechanism",
            *(f"{c} PIDs/min" for c in PID_CLIENTS),
            *(f"{c} rec/s" for c in STEADY_CLIENTS),
            "ProducerIdCount /min",
        ]
    )
    lines = [f"| {head} |", "|" + "---|" * (len(CLIENTS) + 2)]
    for r in results:
        cells = [f"{a} → {b}" if c in RUNNING else "-" for c, (a, b) in r["pids_per_min"].items()]
        cells += [f"{a} → {b}" if c in RUNNING else "-" for c, (a, b) in r["acked_per_s"].items()]
        count = r.get("producer_id_count_per_min")
        cells.append("-" if count is None else f"{count[0]} → {count[1]}")
        lines.append(f"| {r['mechanism']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _grant(cluster: Cluster) -> None:
    """What a cluster that grants every user explicitly gives the two users: WRITE on their
    topics and IDEMPOTENT_WRITE on the cluster (ALLOW ACLs, as kafka-acls.sh would add)."""
    controls = Controls({"kafka.bootstrap.servers": cluster.bootstrap})
    try:
        for user in (OFFENDER, STEADY):
            for topic in ("bench", "small"):
                controls.write(AclBinding(f"User:{user}", "WRITE", "ALLOW", "TOPIC", topic), True)
            controls.write(AclBinding(f"User:{user}", "IDEMPOTENT_WRITE", "ALLOW", "CLUSTER", CLUSTER), True)
    finally:
        controls.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--phase", type=float, default=30.0, help="seconds before, and during (30)")
    parser.add_argument("--mechanisms", default=",".join(mechanisms()), help="comma-separated")
    parser.add_argument("--brokers", type=int, default=1, help="KRaft nodes, each broker and controller (1)")
    parser.add_argument(
        "--strict-acls",
        action="store_true",
        help="allow.everyone.if.no.acl.found=false, each user granted its writes explicitly",
    )
    parser.add_argument(
        "--settle", type=float, default=10.0, help="closed-loop: seconds each measure lasts (10)"
    )
    parser.add_argument(
        "--clients", default=",".join(CLIENTS), help="comma-separated: the clients to run (all)"
    )
    parser.add_argument(
        "--quota", type=float, default=5.0, help="the looped mechanisms: the offender's new PIDs a minute (5)"
    )
    args = parser.parse_args()
    RUNNING[:] = [c for c in CLIENTS if c in args.clients.split(",")]
    chosen = {n: mechanisms()[n] for n in args.mechanisms.split(",")}
    with tempfile.TemporaryDirectory(prefix="pidquota-enforce-") as tmp:
        extra = {"allow.everyone.if.no.acl.found": "false"} if args.strict_acls else None
        plugin = None
        if any(n.startswith("broker-plugin") for n in chosen):  # the brokers run pidquota's plug-in
            from harness.plugin import plugin_jar

            plugin = plugin_jar()
        cluster = Cluster(Path(tmp), size=args.brokers, extra=extra, plugin=plugin, jmx=True)
        cluster.start()
        try:
            from kafka.admin import NewTopic

            from pidquota.store.kafka import admin

            a = admin({"kafka.bootstrap.servers": cluster.bootstrap})
            a.create_topics(
                [
                    NewTopic("bench", 3, 1),
                    NewTopic("small", 1, 1, topic_configs={"max.message.bytes": "1000"}),
                ]
            )
            a.close()
            if args.strict_acls:
                _grant(cluster)
            log = cluster.nodes[0].request_log
            results = []
            for name, mechanism in chosen.items():
                results.append(
                    measure(
                        cluster, name, mechanism, args.phase, log, args.settle, args.strict_acls, args.quota
                    )
                )
                print(json.dumps(results[-1]), flush=True)
        finally:
            cluster.stop()
    print(markdown(results))


if __name__ == "__main__":
    main()
