"""The CLI's promises: one-line errors and exit codes, and the --once round trip."""

import json
import time

import pytest
from harness.cli import run_cli

from pidquota.cli.main import main
from pidquota.cli.run import _first_line
from pidquota.cli.signals import Signals, wait
from pidquota.conf.errors import PidquotaError


@pytest.fixture(autouse=True)
def own_working_folder(tmp_path_factory, monkeypatch):
    """Each test runs in an empty folder of its own: the default output ``./pidquota-out`` of
    the demo a user ran in the checkout (the README's first command) must not leak in."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "producer.id.quota.window.nums=3"], "unknown setting 'producer.id.quota.window.nums'"),
        (["--set", "pidquota.spark.shuffle.partitions=zero"], "pidquota.spark.shuffle.partitions = 'zero'"),
        (["--quotas", "/no/such/quotas.json"], "cannot read quota file '/no/such/quotas.json'"),
        (["--input", "/no/such/events.jsonl", "--once"], "input '/no/such/events.jsonl' does not exist"),
        (["--once"], "--once needs --input"),
        (["--input", "kafka://nohost", "--once"], "'kafka://nohost' is not a Kafka URL"),
        (["--input", "kafka://h/orders, pay", "--once"], "topics are separated by ',' alone, without spaces"),
        (["--input", ".", "--decisions-topic", "dec"], "an output topic given by name needs a Kafka input"),
    ],
)
def test_bad_start_up_gives_one_line_and_exit_2(args, message, capsys):
    assert main(["run", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pidquota: error: ") and message in err
    assert len(err.splitlines()) == 1


def test_bad_quota_value_names_the_entity(tmp_path, capsys):
    q = tmp_path / "q.json"
    q.write_text(json.dumps({"users": {"User:x": {"producer_ids_rate": -3}}}))
    assert main(["run", "--quotas", str(q), "--input", str(tmp_path)]) == 2
    assert "producer_ids_rate for 'User:x' must be a positive number, got -3" in capsys.readouterr().err


@pytest.mark.e2e
def test_missing_java_is_a_clear_error(tmp_path):
    (tmp_path / "e.jsonl").write_text("{}\n")
    r = run_cli("run", "--input", str(tmp_path), "--once", env={"JAVA_HOME": "/nonexistent-jdk"})
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "pidquota: error: JAVA_HOME='/nonexistent-jdk' has no bin/java; point it at a JDK 17 or unset it"
    )


def test_first_line_of_a_wrapped_python_error():
    text = (
        "org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown "
        "from the Python worker: Traceback (most recent call last):\n  File x\n"
        "pidquota.conf.errors.CorruptStateError: quota state has magic b'ZZZ', expected b'PQS'\n"
        "\tat org.apache.spark.Foo(Foo.scala:1)\n"
    )
    assert (
        _first_line(RuntimeError(text))
        == "pidquota.conf.errors.CorruptStateError: quota state has magic b'ZZZ', expected b'PQS'"
    )


def test_a_full_disk_is_one_line_naming_where(tmp_path):
    from types import SimpleNamespace

    from pidquota.cli.run import _disk_full

    plan = SimpleNamespace(out=str(tmp_path / "out"), checkpoint=str(tmp_path / "out" / "_checkpoint"))
    sink = "py4j...\npidquota.streaming.outputs.sink.DiskFull: the disk is full under /d e/out/decisions (0 bytes free): x"
    assert str(_disk_full(RuntimeError(sink), plan)).startswith("the disk is full under /d e/out/decisions (")
    java = "java.io.IOException: No space left on device at /var/spark/blockmgr-1/shuffle_0.data\n\tat x"
    error = str(_disk_full(RuntimeError(java), plan))
    assert error.startswith("the disk is full under /var/spark/blockmgr-1/shuffle_0.data (")
    assert "run the same command again: it resumes from its checkpoint" in error
    bare = "org.apache.hadoop.fs.FSError: java.io.IOException: No space left on device"
    assert f"under {plan.checkpoint} or spark.local.dir" in str(_disk_full(RuntimeError(bare), plan))
    assert _disk_full(RuntimeError("java.io.IOException: Connection reset"), plan) is None


def test_a_jvm_out_of_memory_or_gone_is_one_line_with_a_bigger_heap(monkeypatch):
    from py4j.protocol import Py4JError, Py4JNetworkError

    from pidquota.cli import run

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(run, "_jvm_exit_code", lambda: None)  # the JVM still answers
    oom = RuntimeError("org.apache.spark.SparkException: ... java.lang.OutOfMemoryError: Java heap space")
    line = str(run._jvm_gone(oom, "4g"))
    assert line.startswith("Spark's JVM died or ran out of memory during the run (out of memory)")
    assert "a bigger heap than its 4g, e.g. --set pidquota.spark.driver.memory=8g" in line
    assert "run the same command again" in line
    assert run._jvm_gone(Py4JError("a Java exception of its own"), "1g") is None  # the JVM is there
    assert run._jvm_gone(RuntimeError("java.io.IOException: Connection reset"), "1g") is None
    assert run._jvm_gone(ConnectionRefusedError(111, "refused"), "1g") is None  # not the JVM's
    assert "(it stopped answering)" in str(
        run._jvm_gone(Py4JNetworkError("Answer from Java side is empty"), "1g")
    )
    monkeypatch.setattr(run, "_jvm_exit_code", lambda: 52)
    assert "(it exited with code 52)" in str(run._jvm_gone(Py4JError("x"), "512m"))
    assert "(it exited with code 52)" in str(run._jvm_gone(ConnectionRefusedError(111, "refused"), "1g"))
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "4040")  # spark-submit started the JVM
    assert "e.g. spark-submit --driver-memory 4g" in str(run._jvm_gone(oom, "1g"))
    assert (
        run._bigger_heap("3g") == "6g" and run._bigger_heap("1536m") == "4g" and run._bigger_heap("x") == "4g"
    )


@pytest.mark.e2e
def test_run_once_round_trip_through_the_cli(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text(
        "\n".join(
            json.dumps({"timestamp": i * 1000, "principal": "User:crash-loop", "producer_id": i})
            for i in range(70)
        )
        + "\nnot json\n"
    )
    out = tmp_path / "out"
    r = run_cli("run", "--input", str(events), "--output", str(out), "--once")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "wrote 70 decisions, 1 metric row, 1 dead letter under" in r.stdout
    assert "pidquota: batch 0: 71 events read, 9 throttle decisions, 1 dead letter, 1 user (" in r.stdout
    assert f"pidquota: dead letters by file: {events} 1" in r.stdout
    decisions = [
        json.loads(x) for f in (out / "decisions").glob("*.jsonl") for x in f.read_text().splitlines()
    ]
    assert (
        sum(d["verdict"] == "ADMIT" for d in decisions) == 61
    )  # quota 60/h from conf/quotas.json, +1 refill
    assert (out / "_checkpoint" / "commits").is_dir()


# Start-up checks (issue 9, items 9 and 10): each fails before Spark starts.

DEMO_OFFSETS = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"origin": 1000, "t": 61000}'


def demo_output(folder):
    """What `pidquota run` (the demo) leaves: outputs and a checkpoint with the demo's offsets.
    The sink makes every output's folder, ``skipped/`` empty when nothing was skipped."""
    for kind in ("decisions", "metrics", "dead-letters", "skipped"):
        (folder / kind).mkdir(parents=True)
        if kind != "skipped":
            (folder / kind / "part-0.jsonl").write_text("{}\n")
    (folder / "_checkpoint" / "offsets").mkdir(parents=True)
    (folder / "_checkpoint" / "metadata").write_text('{"id":"q"}\n')
    (folder / "_checkpoint" / "offsets" / "0").write_text(DEMO_OFFSETS)
    return folder


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("pidquota: error: ")
    return err.removeprefix("pidquota: error: ")


@pytest.mark.parametrize("marker", [False, True])
def test_the_demo_checkpoint_read_with_a_file_input_is_one_line(
    tmp_path, monkeypatch, capsys, no_spark, marker
):
    monkeypatch.chdir(tmp_path)
    demo_output(tmp_path / "pidquota-out")
    if marker:
        (tmp_path / "pidquota-out" / "_checkpoint" / "pidquota-source.json").write_text(
            '{"kind": "demo", "input": "demo"}'
        )
    (tmp_path / "small.jsonl").write_text("{}\n")
    assert main(["run", "--input", "small.jsonl", "--once"]) == 2
    assert one_error_line(capsys) == (
        "the checkpoint pidquota-out/_checkpoint belongs to the demo source, not file input 'small.jsonl'; "
        "use another --output (or --checkpoint), or --fresh to delete pidquota-out and start over"
    )
    assert main(["run", "--input", "small.jsonl", "--once", "--fresh"]) == 2
    assert one_error_line(capsys) == "Spark would start here"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.jsonl"]


def test_fresh_refuses_a_folder_that_is_not_pidquota_output(tmp_path, capsys, no_spark):
    out = demo_output(tmp_path / "out")
    (out / "notes.txt").write_text("keep me")
    (tmp_path / "e.jsonl").write_text("{}\n")
    assert main(["run", "--input", str(tmp_path / "e.jsonl"), "--output", str(out), "--once", "--fresh"]) == 2
    assert one_error_line(capsys) == (
        f"--fresh would delete {out}, which does not look like pidquota output (it has notes.txt); "
        "delete it yourself or choose another --output"
    )
    assert (out / "notes.txt").read_text() == "keep me" and (out / "_checkpoint" / "offsets" / "0").exists()


def test_fresh_works_for_the_demo_too(tmp_path, capsys, no_spark):
    out = demo_output(tmp_path / "out")
    assert main(["run", "--output", str(out), "--fresh", "--duration", "1m"]) == 2
    assert one_error_line(capsys) == "Spark would start here"
    assert not out.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--input", "IN", "--speed", "10"],
            "--speed paces the demo only; a file or Kafka input is read as fast",
        ),
        (["--speed", "0"], "--speed must be > 0, got 0"),
        (["--input", "IN", "--starting-offsets", "latest"], "--starting-offsets applies to a Kafka input"),
        (["--duration", "-5"], "--duration '-5' must be positive"),
        (["--duration", "0"], "--duration '0' must be positive"),
        (
            ["--duration", "soon"],
            "--duration 'soon' is not a duration; use a positive number with a unit: 90",
        ),
        (["--duration", "5w"], "--duration '5w' has an unknown unit 'w'"),
        (
            ["--input", "IN", "--quotas", "Q", "--quota-store", "redis://127.0.0.1:1/0"],
            "--quotas Q cannot apply",
        ),
        (
            ["--input", "IN", "--input-format", "record-batches"],
            "reads the record batches of Kafka topics, not",
        ),
        (
            [
                "--input",
                "IN",
                "--input-format",
                "kafka-request-log",
                "--set",
                "pidquota.request.log.timezone=Mars/X",
            ],
            "pidquota.request.log.timezone = 'Mars/X' (from --set) is not a time zone",
        ),
    ],
)
def test_a_flag_that_cannot_apply_is_refused_with_a_reason(tmp_path, capsys, no_spark, args, message):
    (tmp_path / "in.jsonl").write_text("{}\n")
    args = [str(tmp_path / "in.jsonl") if a == "IN" else a for a in args]
    assert main(["run", "--output", str(tmp_path / "out"), *args]) == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("duration", ["90", "90s", "2m", "1h", "1.5h", "500ms"])
def test_run_takes_the_generate_duration_syntax(tmp_path, capsys, no_spark, duration):
    assert main(["run", "--output", str(tmp_path / "out"), "--duration", duration]) == 2
    assert one_error_line(capsys) == "Spark would start here"


class _SlowStart:
    """A query whose first progress report comes ``warm`` seconds after it starts, as on a
    cluster whose executors take a while to come up."""

    def __init__(self, warm: float) -> None:
        self.began, self.warm, self.stopped_at = time.monotonic(), warm, None
        self.status = {"isTriggerActive": False}

    @property
    def isActive(self) -> bool:  # noqa: N802 (Spark's name)
        return self.stopped_at is None

    @property
    def lastProgress(self):  # noqa: N802
        return {"batchId": 0} if time.monotonic() - self.began >= self.warm else None

    def awaitTermination(self, timeout: float) -> None:  # noqa: N802
        time.sleep(timeout)

    def stop(self) -> None:
        self.stopped_at = time.monotonic() - self.began

    def exception(self):
        return None


def test_the_duration_counts_from_the_first_progress_report():
    """``--duration 25s`` on a cluster whose first batch took 24 s once ended with 0 batches."""
    query, signals = _SlowStart(warm=1.5), Signals()
    try:
        assert wait(query, 0.5, signals) is None
    finally:
        signals.restore()
    assert 2.0 <= query.stopped_at < 4.0  # not at 0.5 s, the query's own start plus 0.5


def test_a_checkpoint_s_state_store_is_kept_unless_another_is_given(tmp_path, capsys, monkeypatch):
    """A checkpoint from before pidquota.state.store (or kept by hdfs) goes on with its store
    when the setting is left at its default; given otherwise, it is refused."""
    from pidquota.cli.checkpoints import Source, write_marker

    used = []

    def refuse(config, master=None):
        used.append(config["pidquota.state.store"])
        raise PidquotaError("Spark would start here")

    monkeypatch.setattr("pidquota.streaming.session.spark_session", refuse)
    (tmp_path / "e.jsonl").write_text("{}\n")
    ckpt = tmp_path / "out" / "_checkpoint"
    (ckpt / "state").mkdir(parents=True)
    write_marker(str(ckpt), Source.of(str(tmp_path / "e.jsonl")), 64)  # no store recorded: hdfs
    run = ["run", "--input", str(tmp_path / "e.jsonl"), "--output", str(tmp_path / "out"), "--once"]
    assert main(run) == 2 and used == ["hdfs"]
    assert "the checkpoint keeps its state in pidquota.state.store=hdfs; using it" in capsys.readouterr().err
    assert main([*run, "--set", "pidquota.state.store=rocksdb"]) == 2 and used == ["hdfs"]
    assert "pidquota.state.store=hdfs, not rocksdb" in one_error_line(capsys)


def test_the_principals_layout_needs_rocksdb_and_says_so_before_spark_starts(tmp_path, capsys, no_spark):
    (tmp_path / "e.jsonl").write_text("{}\n")
    run = ["run", "--input", str(tmp_path / "e.jsonl"), "--output", str(tmp_path / "out"), "--once"]
    hdfs = ["--set", "pidquota.state.layout=principals", "--set", "pidquota.state.store=hdfs"]
    assert main([*run, *hdfs]) == 2
    line = one_error_line(capsys)
    assert (
        "pidquota.state.layout=principals" in line and "needs pidquota.state.store=rocksdb, not hdfs" in line
    )
    assert main([*run, "--set", "pidquota.state.layout=principals"]) == 2  # rocksdb, the default: on to Spark
    assert "Spark would start here" in one_error_line(capsys)


def test_the_top_level_help_says_what_pidquota_is_and_how_to_start(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "Cluster-wide producer-ID quotas for Apache Kafka" in out
    for command in ("run", "recommend", "report", "configs", "status", "generate", "package"):
        assert f"\n    {command}" in out, command
    assert "pidquota run --input events.jsonl --output out --once" in out


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"pidquota {version('pidquota')}"


def _banner(tmp_path, input, output="out", **settings):
    from argparse import Namespace

    from pidquota.cli.run_plan import banner
    from pidquota.conf.loader import load

    args = Namespace(input=input, output=output, once=input is not None)
    return banner(args, load(overrides=settings), str(tmp_path / "ck"), 60.0)


def test_own_data_under_the_shipped_quotas_is_told_they_are_the_demo_s(tmp_path):
    from pidquota.conf.loader import DEFAULT_QUOTAS

    line = _banner(tmp_path, "events/")
    assert (
        f"quotas from {DEFAULT_QUOTAS} -- the demo's quotas, not yours (give yours with --quotas FILE" in line
    )
    assert "--quota-store redis://HOST:PORT/DB" in line
    assert "the demo's quotas" not in _banner(tmp_path, None)  # the demo runs under its own quotas
    own = _banner(tmp_path, "events/", **{"pidquota.quotas.file": "mine.json"})
    assert "quotas from mine.json, output" in own


@pytest.mark.parametrize("output", ["out", "out/"])
def test_the_banner_names_the_output_folder_with_one_slash(tmp_path, output):
    assert "output in out/ (new checkpoint)" in _banner(tmp_path, "events/", output)


def test_a_flag_typo_prints_the_command_s_usage_not_the_top_level_one(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["run", "--inptu", "x"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.startswith("usage: pidquota run [-h] [--input PATH|URL]")
    assert err.splitlines()[-1] == "pidquota run: error: unrecognized arguments: --inptu x"


def test_warnings_logged_while_a_command_runs_say_pidquota_warning_once(capsys, monkeypatch):
    import logging

    def warns(args):
        logging.getLogger("pidquota.redis").warning("cannot publish throttle state to Redis (%s)", "down")
        logging.getLogger("pidquota.output").warning("pidquota: output files not rolled")
        logging.getLogger("pidquota.kafka").info("batch 3 sent to Kafka")  # not shown
        return 0

    monkeypatch.setattr("pidquota.cli.status.run", warns)
    assert main(["status"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "pidquota: warning: cannot publish throttle state to Redis (down)",
        "pidquota: warning: output files not rolled",
    ]
    logging.getLogger("pidquota.redis").warning("after the command")  # the handler is gone again
    assert capsys.readouterr().err == ""


def test_a_fresh_installation_compiles_the_judge_in_the_driver_once_and_says_so(monkeypatch, capsys):
    """Without a cache, pidquota run compiles the judge before Spark starts, in one line, so its
    Python workers load it instead of each compiling it; with one, it says nothing."""
    from pidquota.cli import run as cli_run
    from pidquota.quota import kernel
    from pidquota.streaming.outputs import jsonl_kernel

    compiled = []
    monkeypatch.setattr(kernel, "available", lambda: compiled.append(True) or True)
    monkeypatch.setattr(kernel, "compiled_here", lambda: False)
    monkeypatch.setattr(jsonl_kernel, "LOAD_AFTER", jsonl_kernel.LOAD_AFTER)  # put back after
    cli_run._compile_once(20_000)
    assert compiled == [True]
    assert capsys.readouterr().out.startswith("pidquota: compiling the judge for this installation, once")
    monkeypatch.setattr(kernel, "compiled_here", lambda: True)
    cli_run._compile_once(123)
    assert compiled == [True] and capsys.readouterr().out == ""
    assert jsonl_kernel.LOAD_AFTER == 123  # the driver's writer: pidquota.compiled.after
