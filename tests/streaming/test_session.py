"""streaming/session.py: the relay of the JVM's stderr (Spark's own noise dropped, the rest kept),
and the checkpoint files' manager chosen per query."""

import os
import threading

import pytest

from pidquota.streaming import session


def relayed(text: bytes, monkeypatch) -> bytes:
    r, w = os.pipe()
    out_r, out_w = os.pipe()
    write = os.write
    monkeypatch.setattr(session.os, "write", lambda fd, data: write(out_w if fd == 2 else fd, data))
    thread = threading.Thread(target=session._relay, args=(os.fdopen(r, "rb"),))
    thread.start()
    write(w, text)
    os.close(w)
    thread.join(5)
    monkeypatch.undo()
    os.close(out_w)
    with os.fdopen(out_r, "rb") as f:
        return f.read()


def test_the_state_worker_s_start_up_prints_are_dropped_and_everything_else_kept(monkeypatch):
    text = (
        b"WARNING: Using incubator modules: jdk.incubator.vector\n"
        b"Starting Streaming TransformWithStateInPandas Python worker.\n\n"
        b"Streaming TransformWithStateInPandas Python worker received parameters for UDF. ...\n\n"
        b"18:26:52 WARN Something: a real warning\n\n"
        b"pidquota: a line of ours\n"
    )
    assert (
        relayed(text, monkeypatch) == b"18:26:52 WARN Something: a real warning\n\npidquota: a line of ours\n"
    )


def _callback_record(error: BaseException):
    import logging

    return logging.LogRecord(
        "py4j.clientserver",
        logging.ERROR,
        __file__,
        1,
        "There was an exception while executing the Python Proxy on the Python Side.",
        None,
        (type(error), error, None),
    )


def test_a_callback_cut_by_the_jvm_s_death_is_not_logged_and_any_other_error_is(monkeypatch):
    """The sink's foreachBatch asking a JVM that was just killed: py4j's trace of it is dropped
    (the run says the JVM died, in one line); a sink's own error, a Java error, or py4j's error
    while the JVM still runs are logged as py4j logs them."""
    from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError

    lost = session._PY4J_CALLBACK_LOST
    monkeypatch.setattr(session, "jvm_exit_code", lambda wait_s=2.0: -9)  # killed by signal 9
    assert not lost.filter(
        _callback_record(Py4JError("An error occurred while calling o30.getLocalProperty"))
    )
    assert not lost.filter(_callback_record(Py4JNetworkError("Answer from Java side is empty")))
    assert not lost.filter(_callback_record(ConnectionResetError()))
    java = Py4JJavaError.__new__(Py4JJavaError)  # a Java exception's (needs no JVM to make)
    assert lost.filter(_callback_record(java))
    assert lost.filter(_callback_record(OSError(28, "No space left on device")))
    monkeypatch.setattr(session, "jvm_exit_code", lambda wait_s=2.0: None)  # the JVM still runs
    assert lost.filter(_callback_record(Py4JError("An error occurred while calling o30.getLocalProperty")))
    monkeypatch.setattr(session.STOPPING, "is_set", lambda: True)  # a stop on a signal: its end
    assert not lost.filter(
        _callback_record(Py4JError("An error occurred while calling o30.getLocalProperty"))
    )


@pytest.mark.parametrize(
    ("path", "default_fs", "local"),
    [
        ("/tmp/out/_checkpoint", None, True),  # Spark's default file system is the local one
        ("out/_checkpoint", "file:///", True),
        ("file:///tmp/ck", "hdfs://nn:8020", True),
        ("FILE:/tmp/ck", None, True),
        ("/tmp/ck", "hdfs://nn:8020", False),  # a cluster's HDFS where no scheme is given
        ("hdfs://nn:8020/ck", None, False),
        ("s3a://bucket/ck", None, False),
        ("abfss://c@a.dfs.core.windows.net/ck", "file:///", False),
    ],
)
def test_only_a_local_checkpoint_is_local(path, default_fs, local):
    assert session._local_path(path, default_fs) is local


def test_a_local_checkpoint_is_written_through_filesystem_and_any_other_as_spark_chooses(spark):
    conf = spark.conf
    before = conf.get(session.CHECKPOINT_FILES, None), conf.get(session._OURS, None)
    try:
        session.checkpoint_files(spark, "/tmp/pidquota-test/_checkpoint")
        assert conf.get(session.CHECKPOINT_FILES) == session.FILESYSTEM_FILES
        session.checkpoint_files(spark, "hdfs://namenode:8020/pidquota/_checkpoint")
        assert conf.get(session.CHECKPOINT_FILES, None) is None  # Spark's FileContext again
        mine = "org.example.MyCheckpointFileManager"  # a class of the user's own: never replaced
        conf.set(session.CHECKPOINT_FILES, mine)
        conf.unset(session._OURS)
        for path in ("/tmp/pidquota-test/_checkpoint", "hdfs://namenode:8020/ck"):
            session.checkpoint_files(spark, path)
            assert conf.get(session.CHECKPOINT_FILES) == mine
    finally:
        for key, value in zip((session.CHECKPOINT_FILES, session._OURS), before, strict=True):
            if value is None:
                conf.unset(key)
            else:
                conf.set(key, value)


def test_every_query_of_the_tests_writes_its_checkpoint_through_filesystem(make_enforcer, tmp_path):
    """The suite's exactly-once, kill and replay tests run on the manager users get: a query
    started by streaming/query.py on a local folder has it, and its checkpoint is complete."""
    enforcer = make_enforcer(tmp_path, {"User:a": 5})
    got = enforcer.run([{"timestamp": 1_000, "principal": "User:a", "producer_id": 1}])
    assert len(got["decisions"]) == 1
    assert enforcer.spark.conf.get(session.CHECKPOINT_FILES) == session.FILESYSTEM_FILES
    commits = tmp_path / "out" / "_ck" / "commits"
    assert (commits / "0").is_file() and (commits / ".0.crc").is_file()  # checksummed, as before
    assert not [p for p in commits.iterdir() if p.name.endswith(".tmp")]
