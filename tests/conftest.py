"""Shared fixtures, and the test tiers.

One SparkSession for the whole run (a cold JVM plus a pandas UDF costs 15-20 s), created
on first use, so the pure-Python tests never start a JVM. The servers and processes behind
the fixtures live in the ``harness`` package (``tests/harness/``).

**Markers** say what a test starts. They are applied here from the fixtures a test uses
(``spark``, ``make_enforcer``: ``spark``; ``kafka``: ``kafka``; ``redis_server``,
``redis_client``: ``redis``; ``spark_cluster``: ``cluster``), or by a module's
``pytestmark`` where a test starts the thing itself (``e2e``: pidquota in a subprocess;
``prometheus``). Every test that starts none of Spark, a subprocess of pidquota, a
cluster or a Kafka broker is also marked ``quick``: ``pytest -m quick`` is the developer's tier
(docs/development.md). Markers are strict (pyproject.toml), and what a test starts is
checked against its markers (``harness.require``, and :func:`_spark_needs_its_marker` for a SparkSession).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

# scripts/kafka_broker.py starts Apache Kafka for the tests (harness.kafka) as for a user's shell.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import harness  # noqa: E402
import pytest  # noqa: E402
from harness.kafka import ApacheKafka  # noqa: E402
from harness.redis import start_redis  # noqa: E402
from harness.spark_cluster import SparkCluster  # noqa: E402

from pidquota.conf.loader import load  # noqa: E402

# fixture -> the marker every test using it gets
FIXTURE_MARKERS = {
    "spark": "spark",
    "make_enforcer": "spark",
    "kafka": "kafka",
    "gated_kafka": "kafka",
    "redis_server": "redis",
    "redis_client": "redis",
    "spark_cluster": "cluster",
}
# What keeps a test out of the quick tier: a JVM, in this process or another (Apache Kafka is one).
SLOW = ("spark", "e2e", "cluster", "kafka")
# What may start a SparkSession.
SPARK = ("spark", "e2e", "cluster")


# The longest test files (from `--durations=0` of a whole run, longest first), handed out first:
# the workers take whole files in this order (tests/run.sh: --dist loadfile
# --no-loadscope-reorder; without that flag xdist 3.5+ hands out the files with the most tests
# first, and the heaviest ones, of few tests each, went last: 76 s of one worker alone at the end).
HEAVY_FIRST = (
    "streaming/test_faults.py",
    "plugin/test_plugin_broker.py",
    "streaming/test_spark_cluster.py",
    "sources/test_kafka.py",
    "plugin/test_plugin_actuator.py",
    "streaming/test_failover.py",
    "actuate/test_in_a_run.py",
    "plugin/test_plugin_safety.py",
    "sources/test_request_log_input.py",
    "test_packaging.py",
    "streaming/test_fuzz.py",
    "recommend/test_recommend_job.py",
    "streaming/test_state_groups.py",
    "cli/test_demo.py",
    "streaming/test_enforcer_query.py",
    "streaming/test_replay.py",
    "sources/test_follow_crash.py",
    "formats/test_hostile_lines.py",
    "sources/test_request_log_broker.py",
    "observe/test_prometheus.py",
    "streaming/test_class_data.py",
    "store/test_redis_tls.py",
)


def pytest_collection_modifyitems(items):
    for item in items:
        for fixture in item.fixturenames:
            if fixture in FIXTURE_MARKERS:
                item.add_marker(FIXTURE_MARKERS[fixture])
        if not any(item.get_closest_marker(m) for m in SLOW):
            item.add_marker("quick")
    tests = Path(__file__).parent
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}

    def heavy_first(item) -> int:
        try:
            name = Path(str(item.path)).relative_to(tests).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=heavy_first)  # stable: the rest keep their order


def pytest_runtest_setup(item):
    harness.current = item


def pytest_runtest_teardown(item):
    harness.current = None


# Every Spark JVM the tests start, in this process or a `pidquota run` of theirs: C1 alone. A
# test's JVM lives seconds to minutes, and C2's compiling is a third of its CPU, which two
# pytest workers on two cores run short of (pidquota.spark.java.options).
# C1 alone compiles fast; its code cache is 48 MB by default, and one worker's session, alive for
# the whole suite, filled it ("CodeCache is full. Compiler has been disabled", then its JVM died
# and every later Spark test of that worker failed): 240 MB, as a tiered JVM has.
# The serial collector, not G1: a test's heap is small and its JVM short-lived, and G1's
# concurrent threads and barriers cost `pidquota run --once` over test_faults.py's 12 files
# 16-34% more CPU in each of 5 pairs run in turn (40-66 CPU-seconds, against 32-55 serial;
# 2026-11-30). A test broker's CPU did not change with it (scripts/kafka_broker.py keeps G1).
TEST_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC"
os.environ.setdefault("PIDQUOTA_SPARK_JAVA_OPTIONS", TEST_JAVA_OPTIONS)
# ...and no Spark web UI: nobody looks at it during a test, and its server and listeners cost
# a `pidquota run --once` about 2.5 of its 25 CPU seconds (Spark's launcher reads this variable;
# a test that sets its own replaces it).
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.enabled=false pyspark-shell")
# `pidquota generate`'s block store (cli/blocks.py) defaults to the user's state folder: the
# tests keep theirs apart, one per pytest process.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="pidquota-test-state-")


@pytest.fixture(scope="session", autouse=True)
def _spark_needs_its_marker():
    """A test without the ``spark`` (or ``e2e``, ``cluster``) marker that reaches for a
    SparkSession, in the test or in a fixture of any scope, fails, naming the marker, instead
    of quietly starting a JVM in the quick tier."""
    from pidquota.streaming import session

    real = session.spark_session

    def checked(*args, **kwargs):
        if harness.current is not None and not any(harness.current.get_closest_marker(m) for m in SPARK):
            harness.require("spark", "a SparkSession")
        return real(*args, **kwargs)

    session.spark_session = checked
    yield
    session.spark_session = real


@pytest.fixture(scope="session")
def spark():
    from pidquota.streaming.session import spark_session

    # In-process tests check logic, and a failed task fails them at once: local[2,1]. The CLI's
    # default local[2] runs as local[2,4] (tests/streaming/test_faults.py kills a worker).
    overrides = {
        "pidquota.spark.shuffle.partitions": "2",
        "pidquota.spark.master": "local[2,1]",
        "pidquota.spark.java.options": TEST_JAVA_OPTIONS,
    }
    session = spark_session(load(overrides=overrides, environ={}))
    yield session
    session.stop()


@pytest.fixture
def no_spark(monkeypatch):
    """A ``pidquota run`` that gets past its start-up checks stops where Spark would start."""
    from pidquota.conf.errors import PidquotaError

    def refuse(config, master=None):
        raise PidquotaError("Spark would start here")

    monkeypatch.setattr("pidquota.streaming.session.spark_session", refuse)


@pytest.fixture
def make_enforcer(spark):
    """``make_enforcer(tmp_dir, quotas, **settings)`` -> a :class:`harness.enforcer.Enforcer`."""
    from harness.enforcer import Enforcer

    return lambda tmp, quotas, **settings: Enforcer(spark, tmp, quotas, **settings)


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


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """A master and two 1-core workers for the module's tests."""
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """One Apache Kafka broker for the session (SASL/PLAIN users, an authorizer, the request log)."""
    broker = ApacheKafka(tmp_path_factory.mktemp("kafka"))
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def gated_kafka(tmp_path_factory):
    """A second broker for the session whose PLAINTEXT clients pass a :class:`harness.kafka.Gate`:
    ``pause()`` makes it stop answering; a test that pauses it resumes it."""
    broker = ApacheKafka(tmp_path_factory.mktemp("kafka-gated"), gated=True)
    broker.start()
    yield broker
    broker.stop()
