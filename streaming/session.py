"""The SparkSession pidquota runs in: the one way pidquota connects to Spark.

* **Master.** A master given by ``spark-submit --master``, ``spark.master`` in
  Spark's usual places (``--conf``, ``spark-defaults.conf``,
  ``PYSPARK_SUBMIT_ARGS``, ``MASTER``) or ``pidquota run --master`` wins;
  ``pidquota.spark.master`` applies only when none of them gave one. A
  ``spark://`` master that does not answer fails at start-up in one line. A local
  master retries a failed task (``local[N]`` runs as ``local[N,4]``), as a cluster
  does: a Python worker killed mid-batch costs a retry, not the query.
* **Code.** On a non-local master the executors get pidquota's code as a zip
  (``streaming/ship.py``), unless it already came that way (``--py-files``,
  which also works on a local master).
* **Worker Python.** ``spark.pyspark.python`` or ``PYSPARK_PYTHON`` if set,
  else the interpreter running pidquota (in local mode a fresh virtualenv just
  works; on a cluster that path must exist on every node).
* **Memory.** A JVM pidquota starts gets ``pidquota.spark.driver.memory`` as its
  heap, unless the user gave Spark one (``--driver-memory``, ``spark.driver.memory``,
  ``SPARK_DRIVER_MEMORY``).
* **State store.** ``pidquota.state.store``: Spark's HDFS-backed store or RocksDB
  with changelog checkpointing (docs/cluster.md's table measures both).
* **Logs.** Spark logs through ``conf/log4j2.properties`` at
  ``pidquota.log.level`` (WARN), without the routine lines of every start. A
  log4j2 configuration of the user's own is left alone.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from pidquota.conf.errors import ConfigError, PidquotaError
from pidquota.conf.loader import CONF_DIR, Config

MASTER_CONNECT_S = 5.0  # a standalone master answers at once, or not at all
LOG4J2 = CONF_DIR / "log4j2.properties"
_MASTER_URL = re.compile(r"local(\[[^\]]+\])?|local-cluster\[[^\]]+\]|spark://.+|yarn|k8s://.+")
_LOG4J_PROPERTY = "log4j2.configurationFile"
_STATE = "org.apache.spark.sql.execution.streaming.state."
STATE_STORES = {  # pidquota.state.store -> Spark's SQL settings
    "hdfs": {"spark.sql.streaming.stateStore.providerClass": _STATE + "HDFSBackedStateStoreProvider"},
    "rocksdb": {
        "spark.sql.streaming.stateStore.providerClass": _STATE + "RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    },
}


CHECKPOINT_FILES = "spark.sql.streaming.checkpointFileManagerClass"
FILESYSTEM_FILES = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
_OURS = "spark.pidquota.checkpointFileManager.chosen"


def checkpoint_files(spark, checkpoint: str) -> None:
    """Spark's checkpoint files written through Hadoop's ``FileSystem`` API when ``checkpoint``
    is on the local file system, as Spark does where ``FileContext`` is missing.

    Why: without Hadoop's native library (PySpark from pip has none), ``FileContext``'s rename
    runs ``readlink`` as a process for each end of it, and each file is renamed into place: a
    micro-batch's offsets and commit files and each state partition's changelog, with their
    checksum files, each cost processes forked from Spark's JVM (``jcmd`` stacks of the task
    threads: ``org.apache.hadoop.util.Shell`` in 11 of 37 samples). ``FileSystem``'s rename
    is Java's (``rename(2)``: atomic on a local disk, as Spark needs). Worked example, an
    in-process query of 12 batches of 10 events (2 state partitions): a batch's offsets write
    took 40 ms and 12 with it, its commit 40 and 17, the whole batch 790 ms and 655.

    Not on HDFS, S3 or any other scheme (Spark's ``FileContext`` stays: on HDFS its rename
    overwrites atomically, ``FileSystem``'s refuses), and never over a class of the user's own
    (``--conf spark.sql.streaming.checkpointFileManagerClass=...``). Per query, set before it
    starts: the session's later queries on another scheme get Spark's default back. A running
    query keeps the manager it started with (Spark clones the session for it); queries started
    at once from several threads of one session, which pidquota never does, could race here."""
    current = spark.conf.get(CHECKPOINT_FILES, None)
    ours = spark.conf.get(_OURS, None) == "true" and current == FILESYSTEM_FILES
    if current is not None and not ours:
        return  # the user's own
    # the session's Hadoop settings, as Spark's file managers get them (its own spark.hadoop.*)
    default_fs = spark._jsparkSession.sessionState().newHadoopConf().get("fs.defaultFS")
    if _local_path(checkpoint, default_fs):
        spark.conf.set(CHECKPOINT_FILES, FILESYSTEM_FILES)
        spark.conf.set(_OURS, "true")
    elif ours:
        spark.conf.unset(CHECKPOINT_FILES)
        spark.conf.unset(_OURS)


def _local_path(path: str, default_fs: str | None) -> bool:
    """Whether Hadoop reads ``path`` from the local file system: ``file:``, or no scheme where
    the default file system (``fs.defaultFS``) is local (Spark's own default). Stricter than
    ``conf.paths.local_path``, which takes a bare path for the driver's own folder: here a
    bare path on a cluster whose default file system is HDFS is HDFS, as Spark reads it."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", path)
    if scheme:
        return scheme.group(1).lower() == "file"
    return (default_fs or "file:///").lower().startswith("file:")


class JavaNotFoundError(PidquotaError, OSError):
    """Spark needs a JVM and none was found."""


def find_java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return str(java)
        raise JavaNotFoundError(f"JAVA_HOME={home!r} has no bin/java; point it at a JDK 17 or unset it")
    java = shutil.which("java")
    if java is None:
        raise JavaNotFoundError(
            "Java was not found: Spark needs a JDK 17 or 21 on PATH or in JAVA_HOME "
            "(Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless)"
        )
    return java


def spark_session(config: Config, master: str | None = None):
    """Get or create the session from ``config``; ``master``: ``pidquota run --master``."""
    find_java()
    level = config["pidquota.log.level"]
    conf = _gateway(
        config["pidquota.spark.driver.memory"],
        config["pidquota.spark.class.cache"],
        config["pidquota.spark.java.options"],
    )
    chosen = choose_master(master, given_master(conf), config["pidquota.spark.master"])
    check_master(chosen)
    python = conf.get("spark.pyspark.python", None) or os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_PYTHON"] = python
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    partitions = str(config["pidquota.spark.shuffle.partitions"])
    spark = (
        SparkSession.builder.appName("pidquota")
        .master(with_task_retries(chosen))
        .config("spark.pyspark.python", python)
        .config("spark.sql.shuffle.partitions", partitions)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.stateStore.stateSchemaCheck", "true")
        .config("spark.sql.adaptive.enabled", "false")  # not used by streaming; Spark warns if on
        .config(map=_worker_env(conf, chosen, config["pidquota.spark.python.installed"]))
        .getOrCreate()
    )
    spark.conf.set("spark.sql.shuffle.partitions", partitions)
    for key, value in STATE_STORES[config["pidquota.state.store"]].items():
        spark.conf.set(key, value)
    _own_logging(spark.sparkContext._jvm)
    _no_python_source_lookup(spark.sparkContext._jvm)
    _quiet_accumulator_server(spark.sparkContext)
    if _PY4J_RESEND not in logging.getLogger().filters:
        logging.getLogger().addFilter(_PY4J_RESEND)
    callbacks = logging.getLogger("py4j.clientserver")
    if _PY4J_CALLBACK_LOST not in callbacks.filters:
        callbacks.addFilter(_PY4J_CALLBACK_LOST)
    spark.sparkContext.setLogLevel(level)
    from pidquota.streaming import ship

    if not chosen.startswith("local") or ship.shipped():
        ship_code(spark.sparkContext)
    return spark


def _no_python_source_lookup(jvm) -> None:
    """Spark looks up Python data sources installed as packages the first time one is named
    (``DataSourceManager``): a Python process that imports PySpark and scans every installed
    distribution, 2-4 s of a 2-core machine's start. pidquota registers its own sources and
    reads none of those, so it marks the lookup done with nothing found. A Spark without
    that internal field keeps its lookup."""
    from py4j.protocol import Py4JError

    try:
        manager = jvm.java.lang.Class.forName(_SOURCE_MANAGER).getField("MODULE$").get(None)
        if manager.dataSourceBuilders().isEmpty():
            empty = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
            getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Option.apply(empty))
    except Py4JError:
        pass


_SOURCE_MANAGER = "org.apache.spark.sql.execution.datasources.DataSourceManager$"


class _Py4JResend(logging.Filter):
    """py4j logs a lost JVM connection on the root logger, with its traceback, and then raises
    it (``java_gateway.py``, "Exception while sending command."): the error reaches pidquota,
    which reports it in one line, so the log record is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Exception while sending command."


_PY4J_RESEND = _Py4JResend()


class _Py4JCallbackLost(logging.Filter):
    """py4j's callback server logs an exception raised in a Python callback (the sink's
    ``foreachBatch``), with its traceback, before handing it to the JVM
    (``clientserver.py``, "There was an exception while executing the Python Proxy on the
    Python Side."). When the exception is py4j's own, not a Java one, and Spark's JVM is gone,
    the callback was cut by the JVM's death, which ``pidquota run`` reports in one line: the
    record is dropped. Every other record stays (a sink's own error, a JVM still running).
    Found by ``tests/streaming/test_faults.py``: the JVM killed while a batch's sink asked it
    for the query's id printed 30 lines of trace under the run's one line, now and then."""

    def filter(self, record: logging.LogRecord) -> bool:
        from py4j.protocol import Py4JError, Py4JJavaError

        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, Py4JError | ConnectionError) or isinstance(error, Py4JJavaError):
            return True
        return not (STOPPING.is_set() or jvm_exit_code() is not None)


def jvm_exit_code(wait_s: float = 2.0) -> int | None:
    """The exit code of the JVM pidquota started (negative: the signal that killed it), or
    None if it is still running, or was not started by pidquota. A JVM whose socket just
    closed may need a moment before the kernel reports its end: up to ``wait_s``."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return None
    try:
        return proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return None


_PY4J_CALLBACK_LOST = _Py4JCallbackLost()


def _quiet_accumulator_server(sc) -> None:
    """PySpark's accumulator server prints a traceback to stderr when the JVM's connection ends
    mid-update: the JVM died, which ``pidquota run`` says itself in one line. Other errors
    there are printed as before."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is None:
        return
    default = server.handle_error

    def handle_error(request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], EOFError | ConnectionError):
            default(request, client_address)

    server.handle_error = handle_error


# A folder whose sitecustomize.py has Spark's Python workers import the installed PySpark
# rather than its copy in pyspark.zip, which they would compile anew each (the file says how)
WORKER_SITE = Path(__file__).resolve().parent / "worker_site"


def _worker_env(conf, master: str, installed: bool) -> dict[str, str]:
    """The workers' PYTHONPATH to set: only on a local master (a cluster's executors would have
    their own PYTHONPATH replaced by a folder of this machine) and only when it changes."""
    path = worker_path(conf, installed)
    if not master.startswith("local") or path == (conf.get("spark.executorEnv.PYTHONPATH", "") or ""):
        return {}
    return {"spark.executorEnv.PYTHONPATH": path}


def worker_path(conf, installed: bool) -> str:
    """``spark.executorEnv.PYTHONPATH``: what Spark was given, with :data:`WORKER_SITE` first
    when ``installed`` (``pidquota.spark.python.installed``)."""
    given = conf.get("spark.executorEnv.PYTHONPATH", "") or ""
    if not installed or str(WORKER_SITE) in given.split(os.pathsep):
        return given
    return os.pathsep.join(p for p in (str(WORKER_SITE), given) if p)


def _gateway(driver_memory: str = "", class_cache: str = "", java_options: str = ""):
    """Start Spark's JVM, or join the one spark-submit started; returns its SparkConf. A JVM
    pidquota starts logs through ``conf/log4j2.properties`` from its first line and starts
    from the class-data archive in ``class_cache`` (``streaming/class_data.py``), unless the
    user gave the driver Java options of their own, with ``java_options``
    (``pidquota.spark.java.options``) after pidquota's, and gets ``driver_memory``
    (``pidquota.spark.driver.memory``) as its heap, unless the user gave Spark one."""
    from pyspark import SparkConf, SparkContext

    from pidquota.streaming import class_data

    launch = SparkConf(loadDefaults=False)
    given = launch_settings() if SparkContext._gateway is None else {}
    archive = class_data.Archive()
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))  # spark-submit's JVM runs already
    if SparkContext._gateway is None and not submitted and "spark.driver.extraJavaOptions" not in given:
        archive = class_data.prepare(class_cache, find_java(), _spark_home() / "jars")
        options = f"-D{_LOG4J_PROPERTY}={LOG4J2.as_uri()} {archive.options} {java_options}"
        launch.set("spark.driver.extraJavaOptions", options.strip())
    given_memory = "spark.driver.memory" in given or os.environ.get("SPARK_DRIVER_MEMORY")
    if SparkContext._gateway is None and driver_memory and not given_memory:
        launch.set("spark.driver.memory", driver_memory)
    gateway = _launch(launch) if SparkContext._gateway is None else None
    SparkContext._ensure_initialized(gateway=gateway, conf=launch)
    if archive.writing is not None:  # the class path the archive's check needs
        archive.record_class_path(SparkContext._jvm.java.lang.System.getProperty("java.class.path"))
    return SparkConf()  # the JVM's: what spark-submit and Spark's configuration files set


# What the JVM itself prints on stderr at every start, before any logging: Spark's
# launcher adds the incubating vector module, and Java says so.
_JVM_NOISE = (b"WARNING: Using incubator modules",)
# What PySpark's transformWithStateInPandas worker prints at every query start
# (pidquota.state.layout=principals), each line followed by a blank one.
_TWS_WORKER = b"Streaming TransformWithStateInPandas Python worker"


def _launch(conf):
    """Spark's JVM, its stderr relayed to ours without :data:`_JVM_NOISE` (spark-submit's
    JVM, which PySpark joins, keeps its own stderr)."""
    from pyspark.java_gateway import launch_gateway

    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        return launch_gateway(conf)
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
    relay = threading.Thread(target=_relay, args=(gateway.proc.stderr,), name="pidquota-jvm-stderr")
    relay.daemon = True
    relay.start()
    return gateway


# Set once the run is stopping on a signal: what the JVM prints from then on is its own end (a
# signal sent to the whole process group stops it too, and it dies with traces), not news.
STOPPING = threading.Event()


def stopping() -> None:
    """The run stops on a signal: the JVM's stderr and py4j's log of the calls it breaks (its
    callback thread logs every one with a trace) are not printed from now on."""
    STOPPING.set()
    for name in ("py4j", "py4j.clientserver", "py4j.java_gateway"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def _relay(pipe) -> None:
    """Copy the JVM's stderr to file descriptor 2, as if it were inherited, line by line
    (nothing once :data:`STOPPING` is set)."""
    noise = False
    for line in iter(pipe.readline, b""):
        if STOPPING.is_set():
            continue
        if line.startswith(_JVM_NOISE) or _TWS_WORKER in line[:80] or (noise and not line.strip()):
            noise = True
            continue
        noise = False
        os.write(2, line)


def _own_logging(jvm) -> None:
    """Log through ``conf/log4j2.properties`` from now on, unless a log4j2 configuration was
    given (spark-submit without ``--driver-java-options``: its start-up lines are printed
    already, and SparkContext reloads Spark's defaults while it starts). Spark's defaults
    would also hide every INFO line from a PySpark driver, whatever the level."""
    if not jvm.java.lang.System.getProperty(_LOG4J_PROPERTY):
        jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(jvm.java.net.URI(LOG4J2.as_uri()))


# spark-submit's options that take no value, and those that stand for a spark.* key
_SUBMIT_FLAGS = frozenset({"--verbose", "-v", "--supervise", "--help", "-h", "--version", "--usage-error"})
_SUBMIT_KEYS = {
    "--master": "spark.master",
    "--driver-java-options": "spark.driver.extraJavaOptions",
    "--driver-memory": "spark.driver.memory",
}


def submit_options(tokens: list[str]) -> dict[str, str]:
    """The spark.* settings in spark-submit options (``--master X``, ``--conf k=v``...), up
    to the application (its script, jar or ``pyspark-shell``): the application's own
    arguments (``run --master ...``) are not spark-submit's."""
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens) and tokens[i].startswith("-"):
        name, eq, value = tokens[i].partition("=")
        if tokens[i] in _SUBMIT_FLAGS:
            i += 1
            continue
        if not eq:
            value = tokens[i + 1] if i + 1 < len(tokens) else ""
        i += 1 if eq else 2
        if name == "--conf":
            key, _, conf_value = value.partition("=")
            out[key.strip()] = conf_value
        elif name in _SUBMIT_KEYS:
            out[_SUBMIT_KEYS[name]] = value
    return out


def defaults_options(text: str) -> dict[str, str]:
    """The settings of a ``spark-defaults.conf`` (Java properties: ``key value``,
    ``key=value`` or ``key: value``; ``#`` comments)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*([^\s=:#!][^\s=:]*)\s*[=:]?\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def launch_settings() -> dict[str, str]:
    """The spark.* settings the user gave Spark's launcher: ``spark-defaults.conf``,
    ``PYSPARK_SUBMIT_ARGS`` and (under spark-submit) the JVM's own command line."""
    from pyspark import SparkContext

    out: dict[str, str] = {}
    defaults = _defaults_file()
    if defaults.is_file():
        out.update(defaults_options(defaults.read_text(encoding="utf-8", errors="replace")))
    out.update(submit_options(shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))))
    if SparkContext._jvm is not None:
        command = SparkContext._jvm.java.lang.System.getProperty("sun.java.command") or ""
        out.update(submit_options(command.split()[1:]))  # after SparkSubmit's class name
    return out


def _spark_home() -> Path:
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)


def _defaults_file() -> Path:
    return Path(os.environ.get("SPARK_CONF_DIR") or _spark_home() / "conf") / "spark-defaults.conf"


def given_master(conf) -> str | None:
    """``spark.master`` when spark-submit or Spark's configuration gave one, else None.
    Spark's launcher says ``local[*]`` when nobody did; that value counts only when it was
    written somewhere (``--master``, ``spark.master``, ``MASTER``)."""
    value = conf.get("spark.master", None)
    if value is None:
        return None
    if value != "local[*]":
        return value
    named = "spark.master" in launch_settings() or os.environ.get("MASTER")
    return value if named else None


def choose_master(flag: str | None, given: str | None, setting: str) -> str:
    """``--master``, else what Spark was given, else ``pidquota.spark.master``."""
    if flag and given and flag != given:
        raise ConfigError(
            f"--master {flag} disagrees with spark.master={given} (from spark-submit or Spark's "
            "configuration); give the master in one place"
        )
    chosen = flag or given or setting
    if not _MASTER_URL.fullmatch(chosen):
        raise ConfigError(
            f"Spark master {chosen!r} is not a master URL; use local[N], spark://HOST:PORT, yarn or "
            "k8s://HOST:PORT (--master, or pidquota.spark.master)"
        )
    return chosen


TASK_ATTEMPTS = 4  # Spark's spark.task.maxFailures default, which a local master ignores


def with_task_retries(master: str) -> str:
    """A local master that retries a failed task as a cluster does: ``local[N]`` is
    ``local[N,4]`` (``local`` is ``local[1,4]``), so a Python worker killed mid-task costs a
    retry, not the query. A master that names its own attempts, or a cluster's, is kept."""
    m = re.fullmatch(r"local(?:\[([^\],]+)\])?", master)
    return f"local[{m.group(1) or 1},{TASK_ATTEMPTS}]" if m else master


def check_master(url: str) -> None:
    """A ``spark://`` master must answer now: else one line, not a minute of retries."""
    if not url.startswith("spark://"):
        return
    addresses = [a.strip() for a in url.removeprefix("spark://").split(",") if a.strip()]
    errors = []
    for address in addresses:
        host, _, port = address.rpartition(":") if re.search(r":\d+$", address) else (address, "", "7077")
        host = host.strip("[]")  # an IPv6 address: spark://[::1]:7077
        try:
            socket.create_connection((host, int(port)), timeout=MASTER_CONNECT_S).close()
            return
        except (OSError, ValueError) as exc:
            errors.append(f"{address}: {getattr(exc, 'strerror', None) or exc}")
    raise PidquotaError(
        f"cannot reach the Spark master {url} ({'; '.join(errors)}); is it up, and is the URL right?"
    )


def ship_code(sc) -> None:
    """Send pidquota's code to the executors (``SparkContext.addPyFile``), unless it came
    as a zip already (``--py-files``). Before any data source is registered: they carry
    the session's Python includes from then on."""
    from pyspark import SparkFiles

    from pidquota.streaming import ship

    if ship.shipped() is None:
        folder = Path(tempfile.mkdtemp(prefix="pidquota-ship-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)  # Spark serves the file until exit
        sc.addPyFile(str(ship.write_zip(folder / ship.ZIP_NAME)))
    # Spark 4's driver-side runner of Python streaming sources looks for the Python
    # includes under SparkFiles/streaming_job/ (a fixed job id, on every master), where
    # addPyFile and --py-files do not put them; without copies it cannot import a source.
    root = Path(SparkFiles.getRootDirectory())
    (root / "streaming_job").mkdir(exist_ok=True)
    for name in sc._python_includes:
        if (root / name).is_file():
            shutil.copyfile(root / name, root / "streaming_job" / name)
