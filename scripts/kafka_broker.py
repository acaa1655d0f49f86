#!/usr/bin/env python3
"""Apache Kafka without Docker: its jars from Maven Central, one broker or a small KRaft cluster
on loopback ports. The tests start their brokers with it (tests/harness/kafka.py), and so can you:

    python3 scripts/kafka_broker.py fetch         # the jars, once (cached; needs mvn and Java 17)
    python3 scripts/kafka_broker.py run           # a broker on 127.0.0.1:9092 until Ctrl-C
    python3 scripts/kafka_broker.py run --version 3.9.1   # Kafka before 4.0 (log4j 1) alike
    python3 scripts/kafka_broker.py run --plugin plugin/target/pidquota-broker-plugin.jar --jmx-port 9999
                                                  # with pidquota's broker plug-in, JMX on loopback

Each node is a combined broker and controller (KRaft) with three listeners:

- ``PLAINTEXT`` (the bootstrap address): no authentication; clients are ``User:ANONYMOUS``.
- ``SASL_PLAINTEXT``, SASL/PLAIN: clients log in as one of the users (``NAME-secret`` is
  NAME's password unless given), so the request log and the quotas name real ``User:``
  principals.
- ``CONTROLLER``, for the KRaft quorum.

The StandardAuthorizer runs, so ACLs refuse for real; ``User:admin`` and ``User:ANONYMOUS``
are super users, and a resource with no ACL is open to all. The logging is
``docker/kafka/log4j2.yaml``: the request log at DEBUG in ``<dir>/logs/node-N/kafka-request.log``,
a folder per broker, so that ``<dir>/logs`` holds every broker's request log and nothing else.

Standard library only: the tests, the benchmarks and a user's shell all run it as it is.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POM = ROOT / "docker" / "kafka" / "pom.xml"
LOG4J2 = ROOT / "docker" / "kafka" / "log4j2.yaml"
POM_LOG4J = ROOT / "docker" / "kafka" / "pom-log4j.xml"  # Kafka before 4.0: log4j 1 (reload4j)
LOG4J = ROOT / "docker" / "kafka" / "log4j.properties"
VERSION = "4.1.1"  # Apache Kafka; PIDQUOTA_KAFKA_VERSION picks another (4.x, or 3.x with log4j 1)
USERS = ("admin", "alice", "bob", "carol", "crash-loop", "steady", "per-batch", "per-error", "pidquota")
STARTED = "Kafka Server started"  # what kafka.Kafka logs once every listener accepts
START_TIMEOUT_S = 90


class BrokerError(RuntimeError):
    """The jars could not be fetched, or a broker did not start."""


def version() -> str:
    return os.environ.get("PIDQUOTA_KAFKA_VERSION", VERSION)


def uses_log4j1(kafka_version: str) -> bool:
    """Kafka before 4.0 logs through log4j 1 (``config/log4j.properties``), 4.x through log4j2."""
    return int(kafka_version.split(".", 1)[0]) < 4


def cache_dir(kafka_version: str | None = None) -> Path:
    base = os.environ.get("PIDQUOTA_KAFKA_CACHE") or Path.home() / ".cache" / "pidquota"
    return Path(base) / f"kafka-{kafka_version or version()}"


def fetch(kafka_version: str | None = None, quiet: bool = True) -> Path:
    """The folder of Apache Kafka's jars (and a log4j2 binding), fetched from Maven Central by
    ``mvn dependency:copy-dependencies`` on ``docker/kafka/pom.xml`` the first time; cached."""
    kafka_version = kafka_version or version()
    libs = cache_dir(kafka_version)
    if (libs / ".complete").exists() and any(libs.glob("kafka-tools-[0-9]*.jar")):
        return libs  # (a cache from before the tools were fetched too is fetched again)
    shutil.rmtree(libs, ignore_errors=True)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("mvn is not installed: the broker's jars come from Maven Central through it")
    partial = libs.with_name(libs.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    cmd = [
        mvn,
        "-B",
        *(["-q"] if quiet else []),
        "-f",
        str(POM_LOG4J if uses_log4j1(kafka_version) else POM),
        f"-Dkafka.version={kafka_version}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={partial}",
        "-DincludeScope=runtime",
    ]
    done = subprocess.run(cmd, capture_output=quiet, text=True)
    if done.returncode != 0:
        tail = (done.stdout or "")[-2000:] if quiet else ""
        raise BrokerError(f"mvn could not fetch Apache Kafka {kafka_version}:\n{tail}")
    (partial / ".complete").write_text(kafka_version + "\n")
    try:
        partial.rename(libs)
    except OSError:  # another process finished first
        shutil.rmtree(partial, ignore_errors=True)
    return libs


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports, below the kernel's range of ephemeral ports. A port
    the kernel hands out for ``bind(0)`` is one it also hands out as the local end of an outgoing
    connection: in the seconds before a broker binds it, another process's client took one
    (``Address already in use``, a broker that never started, one run in three of the suite).
    Random ports under that range are never taken so; each is bound while the others are
    chosen, so none is given twice, and one in use now is passed over. Each is also claimed
    among the processes of this machine that pick ports here (:func:`_claim`): two pytest
    workers once drew the same port within the seconds before either broker bound it, and one
    worker's every Kafka test failed."""
    import random

    low = _ephemeral_low()
    sockets: list[socket.socket] = []
    try:
        while len(sockets) < n:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", random.randrange(10_000, low) if low > 11_000 else 0))
            except OSError:
                s.close()
                continue
            if not _claim(s.getsockname()[1]):
                s.close()
                continue
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


CLAIMS = Path(os.environ.get("TMPDIR") or "/tmp") / "pidquota-ports"
CLAIM_S = 600  # a claim lasts from 10 to 20 minutes: long past any server's start


def _claim(port: int, now: float | None = None) -> bool:
    """Claim ``port`` for this process among the processes of this machine that pick ports with
    :func:`free_ports`: a file ``PORT.K`` in :data:`CLAIMS`, K the current ``CLAIM_S`` window,
    made only if absent (``O_EXCL``: one process wins), and refused while the last window's is
    there. Example: a claim of port 16119 at 23:27:52 UTC on 2026-11-30 is ``16119.2993468``
    (23:20 to 23:30); another process asking for 16119 before 23:40 finds it and picks another
    port. Files of older windows go at a process's first claim; where the folder cannot be
    written, every port is free to take."""
    window = int((time.time() if now is None else now) // CLAIM_S)
    try:
        CLAIMS.mkdir(exist_ok=True)
        if (CLAIMS / f"{port}.{window - 1}").exists():
            return False
        os.close(os.open(CLAIMS / f"{port}.{window}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    except OSError:
        return True
    global _swept
    if not _swept:  # once a process: every port's claims of windows past
        _swept = True
        for old in CLAIMS.iterdir():
            if old.suffix[1:].isdigit() and int(old.suffix[1:]) < window - 1:
                old.unlink(missing_ok=True)
    return True


_swept = False


def _ephemeral_low() -> int:
    """The lowest port the kernel gives outgoing connections (Linux's ip_local_port_range), or
    32768, IANA's and Linux's default, where it cannot be read."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _die_with_parent() -> None:
    """In the broker's process before Java starts: SIGTERM it when its parent dies (Linux's
    PR_SET_PDEATHSIG), so that a test run or shell killed without its clean-up leaves no broker
    behind. Its own session keeps a terminal's Ctrl-C for the parent, which stops it cleanly."""
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # not Linux: the clean-up stops it, as before
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def java_cmd(
    libs: Path,
    main: str,
    *args: str,
    heap: str = "512m",
    logs: Path | None = None,
    log4j2: Path = LOG4J2,
    extra_jars: tuple[Path, ...] = (),
    jmx_port: int | None = None,
    java: str | None = None,
    c2: bool = False,
    options: tuple[str, ...] = (),
) -> list[str]:
    """The command line of a JVM running ``main`` on ``libs``; ``java``: the runtime (default the
    ``java`` on PATH; a Kafka 3.9 broker may run on Java 11). The class-data archive is the
    default runtime's alone. ``c2``: both of the JVM's compilers, as a production broker runs
    (a cost benchmark's); else C1 alone. ``options``: more of the JVM's own (a benchmark's)."""
    default = shutil.which("java")
    if java is None and default is None:
        raise BrokerError("java is not installed: Apache Kafka 4.x needs Java 17 or later")
    logging = (
        f"-Dlog4j.configuration=file:{log4j2}"
        if log4j2.suffix == ".properties"
        else f"-Dlog4j2.configurationFile={log4j2}"
    )
    archive = _class_archive(default, libs, main) if java is None else []
    java = java or default
    props = [logging, *archive]
    # a tool's JVM too (JmxTool, StorageTool): else log4j's ${kafka.logs.dir} is the working
    # folder, and a kafka-request.log appears wherever the command ran
    props.append(f"-Dkafka.logs.dir={logs if logs is not None else cache_dir() / 'tool-logs'}")
    if jmx_port is not None:  # for JmxTool (the broker's ProducerIdCount): loopback, no auth
        props += [
            f"-Dcom.sun.management.jmxremote.port={jmx_port}",
            f"-Dcom.sun.management.jmxremote.rmi.port={jmx_port}",
            "-Dcom.sun.management.jmxremote.authenticate=false",
            "-Dcom.sun.management.jmxremote.ssl=false",
            "-Djava.rmi.server.hostname=127.0.0.1",
        ]
    return [
        java,
        f"-Xmx{heap}",
        "-Xms64m",
        # a test's or a trial's broker, lightly loaded: C1 alone, without C2's compile threads,
        # spends about a third less CPU (what a 2-core test machine runs short of)
        *([] if c2 else ["-XX:TieredStopAtLevel=1"]),
        *options,
        "-Djava.awt.headless=true",
        *props,
        "-cp",
        os.pathsep.join([f"{libs}/*", *map(str, extra_jars)]),
        main,
        *args,
    ]


def _class_archive(java: str, libs: Path, main: str) -> list[str]:
    """Java's class-data archive for ``main``, beside the jars' cache, when pidquota is
    installed (``pidquota.streaming.class_data``): a broker's start maps the classes the
    first one wrote as it stopped, instead of loading them from the jars."""
    try:
        from pidquota.streaming.class_data import java_options
    except ImportError:
        return []
    name = "broker" if main == "kafka.Kafka" else main.rpartition(".")[2].lower()
    return java_options(str(cache_dir() / "jvm"), java, libs, name=f"kafka-{name}").split()


@dataclass
class Node:
    """One combined broker and controller: its ports, folder and process."""

    node_id: int
    workdir: Path
    port: int  # PLAINTEXT; the Cluster picks them all at once (:func:`free_ports`: all distinct)
    sasl_port: int
    controller_port: int
    jmx_port: int  # JMX, on loopback (Cluster(jmx=True))
    advertised_port: int | None = None  # a relay's port in front of ``port`` (tests' Gate)
    proc: subprocess.Popen | None = None
    out_from: int = 0  # where this start's output begins in ``stdout`` (a restart appends)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.advertised_port or self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def logs(self) -> Path:
        """Its request log's folder: ``logs/node-N`` beside the nodes' own folders."""
        return self.workdir.parent / "logs" / f"node-{self.node_id}"

    @property
    def request_log(self) -> Path:
        return self.logs / "kafka-request.log"

    @property
    def stdout(self) -> Path:
        return self.workdir / "broker.out"


class Cluster:
    """``size`` KRaft nodes, each broker and controller, on free loopback ports under ``workdir``.

    ``users`` maps each SASL/PLAIN user to its password; ``extra`` adds or overrides broker
    settings (``{"num.partitions": "3"}``); ``log4j2`` is the logging file (default
    ``docker/kafka/log4j2.yaml``; ``docker/kafka/log4j.properties`` for Kafka 3.x); ``plugin``,
    pidquota's broker plug-in jar (``plugin/``): it is the authorizer then, reading its state
    topic through the node's own PLAINTEXT listener; ``c2``: the JVM's both compilers, as in
    production (a cost benchmark), else C1 alone (less CPU for a lightly loaded test broker);
    ``jvm_options``: more options of the JVM's own (a benchmark's)."""

    def __init__(
        self,
        workdir: Path,
        size: int = 1,
        users: dict[str, str] | None = None,
        extra: dict[str, str] | None = None,
        heap: str = "512m",
        kafka_version: str | None = None,
        log4j2: Path = LOG4J2,
        plugin: Path | None = None,
        jmx: bool = False,
        java: str | None = None,
        c2: bool = False,
        jvm_options: tuple[str, ...] = (),
    ):
        self.workdir = Path(workdir)
        self.java = java
        self.c2 = c2
        self.jvm_options = tuple(jvm_options)
        self.plugin = Path(plugin) if plugin else None
        self.jmx = jmx
        self.users = users or {u: f"{u}-secret" for u in USERS}
        self.extra = dict(extra or {})
        self.heap = heap
        self.version = kafka_version or version()
        ports = iter(free_ports(4 * size))  # every port of the cluster distinct
        names = ("port", "sasl_port", "controller_port", "jmx_port")
        self.nodes = [
            Node(i, self.workdir / f"node-{i}", **{name: next(ports) for name in names})
            for i in range(1, size + 1)
        ]
        self.id = cluster_id()
        self.libs: Path | None = None
        # Kafka before 4.0 reads log4j 1's properties: the shipped ones, unless given others
        self.log4j2 = LOG4J if uses_log4j1(self.version) and Path(log4j2) == LOG4J2 else Path(log4j2)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def logs(self) -> Path:
        """Every node's request-log folder (``node-N``), and nothing else."""
        return self.workdir / "logs"

    @property
    def sasl_bootstrap(self) -> str:
        return ",".join(n.sasl_bootstrap for n in self.nodes)

    def properties(self, node: Node) -> dict[str, str]:
        """The node's server.properties."""
        n = len(self.nodes)
        jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
            f'user_{user}="{password}"' for user, password in self.users.items()
        )
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": ",".join(
                f"{m.node_id}@127.0.0.1:{m.controller_port}" for m in self.nodes
            ),
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},SASL_PLAINTEXT://127.0.0.1:{node.sasl_port},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{node.bootstrap},SASL_PLAINTEXT://{node.sasl_bootstrap}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas + ";",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "true",
            "log.dirs": str(node.workdir / "data"),
            "num.partitions": "1",
            "default.replication.factor": str(min(n, 3)),
            "offsets.topic.replication.factor": str(min(n, 3)),
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": str(min(n, 3)),
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": str(min(n, 3)),
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.plugin is not None:
            props["authorizer.class.name"] = "io.pidquota.plugin.PidQuotaAuthorizer"
            props["pidquota.plugin.bootstrap.servers"] = node.bootstrap
        props.update(self.extra)
        return props

    def _write(self, node: Node) -> Path:
        node.workdir.mkdir(parents=True, exist_ok=True)
        node.logs.mkdir(parents=True, exist_ok=True)
        path = node.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.properties(node).items()))
        return path

    def format(self) -> None:
        self.libs = fetch(self.version)
        for node in self.nodes:
            config = self._write(node)
            cmd = java_cmd(
                self.libs,
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={self.id}",  # one word: an id may begin with "-"
                "-c",
                str(config),
                heap="256m",
                logs=node.logs,
                log4j2=self.log4j2,
                java=self.java,
            )
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise BrokerError(
                    f"formatting node {node.node_id} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
                )

    def start(self) -> Cluster:
        """Format every node's storage, start them all, and wait until each serves."""
        self.format()
        for node in self.nodes:
            self.start_node(node, wait=False)
        for node in self.nodes:
            self.wait_started(node)
        return self

    def start_node(self, node: Node, wait: bool = True) -> None:
        """Start (or restart) one node on its own storage."""
        config = self._write(node)
        libs = self.libs or fetch(self.version)
        jars = (self.plugin,) if self.plugin else ()
        cmd = java_cmd(
            libs,
            "kafka.Kafka",
            str(config),
            heap=self.heap,
            logs=node.logs,
            log4j2=self.log4j2,
            extra_jars=jars,
            jmx_port=node.jmx_port if self.jmx else None,
            java=self.java,
            c2=self.c2,
            options=self.jvm_options,
        )
        node.out_from = node.stdout.stat().st_size if node.stdout.exists() else 0
        with node.stdout.open("a") as out:
            node.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent
            )
        if wait:
            self.wait_started(node)

    def wait_started(self, node: Node, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if node.proc.poll() is not None:
                raise BrokerError(f"node {node.node_id} exited ({node.proc.returncode}); see {node.stdout}")
            with node.stdout.open("rb") as out:
                out.seek(node.out_from)
                if STARTED.encode() in out.read():
                    return
            time.sleep(0.1)
        raise BrokerError(f"node {node.node_id} did not start within {timeout_s:g} s; see {node.stdout}")

    def producer_id_count(self) -> int:
        """The brokers' ``ProducerIdCount`` summed (KIP-847: the producer ids in every partition's
        producer state, which the broker keeps in memory); needs ``jmx=True``."""
        name = "kafka.server:type=ReplicaManager,name=ProducerIdCount"
        return sum(int(self.jmx_value(node, name, "Value")) for node in self.nodes)

    def jmx_value(self, node: Node, object_name: str, attribute: str) -> float:
        """One JMX attribute of ``node``, read with Kafka's own JmxTool; needs ``jmx=True``."""
        url = f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{node.jmx_port}/jmxrmi"
        cmd = java_cmd(
            self.libs or fetch(self.version),
            "org.apache.kafka.tools.JmxTool",
            "--object-name",
            object_name,
            "--attributes",
            attribute,
            "--one-time",
            "true",
            "--jmx-url",
            url,
            heap="128m",
        )
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        rows = [line for line in done.stdout.splitlines() if line and line[0].isdigit()]
        if done.returncode != 0 or not rows:
            raise BrokerError(
                f"JmxTool on node {node.node_id} ({object_name} {attribute}): "
                f"{done.stdout[-500:]}{done.stderr[-500:]}"
            )
        return float(rows[-1].split(",")[-1])

    def kill(self, node: Node) -> None:
        """kill -9, as a crash."""
        if node.proc is not None and node.proc.poll() is None:
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(timeout=30)

    def stop_node(self, node: Node) -> None:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.terminate()
            try:
                node.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill(node)

    def stop(self, timeout_s: float = 15) -> None:
        """Stop every node at once (one by one, the last voters wait for a quorum that is
        gone); a node still running after ``timeout_s`` is killed."""
        running = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        for node in running:
            node.proc.terminate()
        deadline = time.monotonic() + timeout_s
        for node in running:
            try:
                node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(node)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    sub = ap.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="fetch Apache Kafka's jars from Maven Central (cached)")
    f.add_argument("--version", default=None, help=f"Apache Kafka version (default {version()})")
    r = sub.add_parser("run", help="run a broker in the foreground until Ctrl-C")
    r.add_argument(
        "--dir", type=Path, default=Path("kafka-local"), help="its data and logs (default ./kafka-local)"
    )
    r.add_argument("--port", type=int, default=9092, help="the PLAINTEXT listener (default 9092)")
    r.add_argument(
        "--sasl-port",
        type=int,
        default=None,
        help="the SASL_PLAINTEXT listener (default --port + 2, or + --nodes: 9094 for one node)",
    )
    r.add_argument("--version", default=None, help=f"Apache Kafka version (default {version()})")
    r.add_argument(
        "--plugin",
        type=Path,
        default=None,
        metavar="JAR",
        help="pidquota's broker plug-in jar (mvn -f plugin/pom.xml package builds it): the broker's\n"
        "authorizer, reading its state topic through the PLAINTEXT listener",
    )
    r.add_argument("--jmx-port", type=int, default=None, help="open JMX on this loopback port (no auth)")
    r.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="KRaft nodes, each broker and controller (default 1); node N listens on --port + N - 1\n"
        "and --sasl-port + N - 1 (JMX: --jmx-port + N - 1)",
    )
    r.add_argument(
        "--request-log",
        choices=("debug", "warn"),
        default="debug",
        help="the request log's level: debug writes a line per request (pidquota's kafka-request-log\n"
        "input; it costs the broker CPU), warn as Kafka ships it (default debug)",
    )
    r.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting over the generated server.properties (repeatable)",
    )
    r.add_argument(
        "--properties",
        type=Path,
        default=None,
        metavar="FILE",
        help="broker settings from a properties file, over the generated ones (then --set)",
    )
    args = ap.parse_args(argv)
    try:
        if args.command == "fetch":
            print(fetch(args.version, quiet=False))
            return 0
        return _run(args)
    except BrokerError as exc:
        print(f"kafka_broker: {exc}", file=sys.stderr)
        return 1


def _settings(args) -> dict[str, str]:
    """``--properties FILE`` then each ``--set KEY=VALUE``: the broker settings over the generated ones."""
    out: dict[str, str] = {}
    if args.properties is not None:
        if not args.properties.is_file():
            raise BrokerError(f"--properties {args.properties}: no such file")
        for number, line in enumerate(args.properties.read_text().splitlines(), 1):
            text = line.strip()
            if not text or text[0] in "#!":
                continue
            key, sep, value = text.partition("=")
            if not sep:
                raise BrokerError(f"--properties {args.properties} line {number}: {text!r} is not KEY=VALUE")
            out[key.strip()] = value.strip()
    for given in args.set:
        key, sep, value = given.partition("=")
        if not sep or not key.strip():
            raise BrokerError(f"--set {given!r}: give KEY=VALUE, e.g. --set num.partitions=3")
        out[key.strip()] = value.strip()
    return out


def _run(args) -> int:
    if args.plugin is not None and not args.plugin.is_file():
        raise BrokerError(
            f"--plugin {args.plugin}: no such jar; build it with `mvn -B -q -f plugin/pom.xml package` "
            "(plugin/target/pidquota-broker-plugin.jar)"
        )
    if args.nodes < 1:
        raise BrokerError(f"--nodes {args.nodes}: give 1 or more")
    if args.sasl_port is None:  # after every node's PLAINTEXT port
        args.sasl_port = args.port + max(2, args.nodes)
    cluster = Cluster(
        args.dir,
        size=args.nodes,
        kafka_version=args.version,
        plugin=args.plugin,
        jmx=args.jmx_port is not None,
        extra=_settings(args),
        log4j2=_logging(args, kafka_version=args.version),
    )
    for i, node in enumerate(cluster.nodes):
        node.port, node.sasl_port = args.port + i, args.sasl_port + i
        if args.jmx_port is not None:
            node.jmx_port = args.jmx_port + i
    _check_distinct(cluster, args)
    for i, node in enumerate(cluster.nodes):
        _check_free(node, args, i)
    kept = [(node.workdir / "data" / "meta.properties").exists() for node in cluster.nodes]
    if any(kept) and not all(kept) or (args.dir / f"node-{args.nodes + 1}" / "data").exists():
        raise BrokerError(
            f"{args.dir} holds a cluster of another size: run it with the same --nodes, or delete {args.dir}"
        )
    if all(kept):
        cluster.libs = fetch(cluster.version)
        for node in cluster.nodes:
            cluster.start_node(node, wait=False)  # keep the data of the last run
        for node in cluster.nodes:
            cluster.wait_started(node)
    else:
        cluster.start()
    _say_up(cluster, args)
    try:
        cluster.nodes[0].proc.wait()
    except KeyboardInterrupt:
        cluster.stop()
    return 0


def _logging(args, kafka_version: str | None) -> Path:
    """The logging file: Kafka's own with the request log at DEBUG, or at WARN (``--request-log``)."""
    if args.request_log == "debug":
        return LOG4J if uses_log4j1(kafka_version or version()) else LOG4J2
    return request_log_at_warn(args.dir, kafka_version)


def request_log_at_warn(folder: Path, kafka_version: str | None = None) -> Path:
    """A logging file in ``folder`` for ``kafka_version``: Kafka's own, the request log at WARN as
    Kafka ships it (log4j 1's properties before Kafka 4, log4j 2's YAML after)."""
    shipped = LOG4J if uses_log4j1(kafka_version or version()) else LOG4J2
    folder.mkdir(parents=True, exist_ok=True)
    quiet = folder / f"request-log-warn{shipped.suffix}"
    text = shipped.read_text()
    changed = text.replace("        level: DEBUG\n", "        level: WARN\n").replace(
        "log4j.logger.kafka.request.logger=DEBUG", "log4j.logger.kafka.request.logger=WARN"
    )
    if changed == text:
        raise BrokerError(f"{shipped} no longer sets the request log at DEBUG where this expects it")
    quiet.write_text(changed)
    return quiet


def _check_distinct(cluster: Cluster, args) -> None:
    """Every node's ports distinct: node N's --port + N - 1 must not be another's SASL or JMX port."""
    seen: dict[int, str] = {}
    for node in cluster.nodes:
        named = {"PLAINTEXT": node.port, "SASL_PLAINTEXT": node.sasl_port, "controller": node.controller_port}
        if args.jmx_port is not None:
            named["JMX"] = node.jmx_port
        for what, port in named.items():
            if port in seen:
                raise BrokerError(
                    f"port {port} would be node {node.node_id}'s {what} and {seen[port]}: give --port, "
                    "--sasl-port and --jmx-port ranges --nodes apart"
                )
            seen[port] = f"node {node.node_id}'s {what}"


def _check_free(node: Node, args, i: int) -> None:
    ports = [("--port", node.port), ("--sasl-port", node.sasl_port)]
    for flag, port in ports + ([("--jmx-port", node.jmx_port)] if args.jmx_port is not None else []):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                where = flag if i == 0 else f"{flag} (node {i + 1}: {flag} + {i})"
                raise BrokerError(
                    f"port {port} is in use (a broker already running?); pick another with {where}"
                ) from None


def _say_up(cluster: Cluster, args) -> None:
    first = cluster.nodes[0]
    print(
        f"Apache Kafka {cluster.version} is up ({len(cluster.nodes)} node(s)): PLAINTEXT {cluster.bootstrap} "
        f"(User:ANONYMOUS), SASL_PLAINTEXT {cluster.sasl_bootstrap} (SASL/PLAIN; users "
        f"{', '.join(cluster.users)}, password NAME-secret); request log at {args.request_log.upper()}, "
        f"{first.request_log}{' (and each node its own)' if len(cluster.nodes) > 1 else ''}; settings "
        f"{first.workdir / 'server.properties'}"
        + (f"; pidquota's plug-in {args.plugin}" if args.plugin else "")
        + (f"; JMX 127.0.0.1:{args.jmx_port}" if args.jmx_port else "")
        + ". Ctrl-C stops it.",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
