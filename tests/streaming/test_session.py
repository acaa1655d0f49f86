"""streaming/session.py's relay of the JVM's stderr: Spark's own noise dropped, the rest kept."""

import os
import threading

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
