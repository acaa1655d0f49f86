"""State at scale: Spark's two state stores with 10k and 100k active principals.

    python benchmarks/state_scale.py [--principals 10000 100000] [--batches 5] [--touch 1.0]
    python benchmarks/state_scale.py --principals 1000000 --stores rocksdb --batches 4 --touch 0.01 --driver-memory 4g \
        --layouts groups principals

For each state store (``pidquota.state.store``: ``hdfs``, Spark's default
HDFS-backed store; ``rocksdb``, RocksDB with changelog checkpointing) and each
number of principals, one fresh process (one JVM, local[2], Spark's default
1 GiB driver memory, or ``--driver-memory``) runs the enforcer on ``--batches`` files, one file (one
minute of event time) per micro-batch. Every principal sends in every batch:
its two long-lived producers and one new PID, so every principal's state
changes every batch (the worst case for checkpoint writes). With ``--touch F``
every principal sends in the first batch only, and a random fraction F of them
(a different one each time) in each later batch: the 1M-principal case of
issue 23 (its target: a batch touching 1% writes at most 5% of the state; with
64 state groups, 1% of 100k principals touches every group, and a touched group
is written whole). ``--layouts groups principals`` runs each store with each state
layout (``pidquota.state.layout``; ``principals`` needs ``rocksdb``, and writes only
the principals a batch touched).
Printed per run:

- the median batch time (``triggerExecution``) after the first batch;
- the state on disk at the end (``CHECKPOINT/state``) and what each batch adds
  to the checkpoint (its delta or changelog files; RocksDB's snapshots
  separately, as the maintenance thread uploads them), also as a share of the
  first batch's (which writes every principal's state), over the batches with data;
- every state file written after the first batch, snapshots too, per batch;
- the JVM's heap in use after a GC, and its resident size (in local mode the
  driver and the executor are this one JVM), and the Python workers' memory
  (proportional set size: the pages forked workers share are counted once);
- Spark's own ``memoryUsedBytes`` of the state operator.

Then, without Spark, what one principal's state blob costs by quota: bytes
when its filter is full, and the time to write and read it.

Asserts nothing; decisions are compared between the stores and layouts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

T0 = 1_767_225_600_000
_VERSIONED = re.compile(r"^(\d+)\.(delta|snapshot|changelog|zip)$")


def write_input(folder: Path, principals: int, batches: int, touch: float = 1.0) -> int:
    """One file per batch: each principal's two long-lived PIDs and one new PID (after
    the first batch, only a random fraction ``touch`` of the principals)."""
    import numpy as np

    folder.mkdir(parents=True)
    rng = np.random.default_rng(3)
    n = 0
    for b in range(batches):
        who = range(principals)
        if b and touch < 1.0:
            who = sorted(rng.choice(principals, max(1, int(principals * touch)), replace=False).tolist())
        with open(folder / f"part-{b:03d}.jsonl", "w") as f:
            t = T0 + b * 60_000
            for p in who:
                for k, pid in enumerate((p * 1000, p * 1000 + 1, p * 1000 + 2 + b)):
                    f.write(f'{{"timestamp":{t + k},"principal":"User:u{p}","producer_id":{pid}}}\n')
                    n += 1
    return n


def proc_kib(pid: int, file: str, field: str) -> int:
    """A size in KiB from ``/proc/PID/FILE`` (0 when the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/{file}").read_text()
    except OSError:
        return 0
    return int(re.search(rf"{field}:\s+(\d+)", text).group(1))


def rss_kib(pid: int) -> int:
    return proc_kib(pid, "status", "VmRSS")


def pss_kib(pid: int) -> int:
    """Proportional set size: forked workers' shared pages counted once in total."""
    return proc_kib(pid, "smaps_rollup", "Pss")


def python_workers_kib() -> int:
    total = 0
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
                total += pss_kib(int(proc.name))
    return total


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def written_since(folder: Path, when: float) -> int:
    """Bytes of the files in ``folder`` last written after ``when`` (epoch seconds)."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and f.stat().st_mtime > when)


def per_batch_files(state: Path) -> tuple[dict[int, int], int]:
    """Bytes of the files named after each version (delta/changelog/snapshot), and the
    bytes of everything else (RocksDB's uploaded SST files and metadata)."""
    by_version: dict[int, int] = {}
    other = 0
    for f in state.rglob("*"):
        if not f.is_file() or f.name.startswith("."):
            continue
        m = _VERSIONED.match(f.name)
        if m and m.group(2) in ("delta", "changelog"):
            by_version[int(m.group(1))] = by_version.get(int(m.group(1)), 0) + f.stat().st_size
        else:
            other += f.stat().st_size
    return by_version, other


def one_run(
    store: str, principals: int, batches: int, touch: float = 1.0, heap: str = "", layout: str = "groups"
) -> dict:
    """The enforcer on a fresh input, in this process: the numbers of one table row."""
    from pidquota.conf.loader import load
    from pidquota.quota import StaticQuotas
    from pidquota.streaming import query as q
    from pidquota.streaming.outputs.sink import JsonlSink
    from pidquota.streaming.session import spark_session

    work = Path(tempfile.mkdtemp(prefix=f"pidquota-state-{store}-"))
    try:
        events = write_input(work / "in", principals, batches, touch)
        overrides = {"pidquota.state.store": store, "pidquota.spark.driver.memory": heap}
        config = load(environ={}, overrides={**overrides, "pidquota.state.layout": layout})
        spark = spark_session(config)
        quotas = StaticQuotas.from_file(config.quotas_path())
        out, ck = work / "out", work / "out" / "_ck"
        screen = config["pidquota.principal.max.length"]
        lines = q.file_source(spark, str(work / "in"), 1, str(ck), screen=screen)
        query = q.start(q.enforcer(lines, config, quotas), JsonlSink(out), str(ck), True, 0)
        query.awaitTermination()
        row = {
            "store": store,
            "layout": layout,
            "principals": principals,
            "events": events,
            "touch": touch,
            "driver": heap or "1g",
        }
        return row | measure(spark, query, ck, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(spark, query, ck: Path, out: Path) -> dict:
    """One finished run's numbers: batch time, checkpoint bytes, memory, decisions."""
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    jvm = spark._jvm
    jvm.java.lang.System.gc()
    runtime = jvm.java.lang.Runtime.getRuntime()
    heap = runtime.totalMemory() - runtime.freeMemory()
    jvm_pid = jvm.java.lang.ProcessHandle.current().pid()
    by_version, other = per_batch_files(ck / "state")
    decisions = sorted(
        line.rsplit(',"batch_id"', 1)[0]
        for f in (out / "decisions").glob("part-*.jsonl")
        for line in f.read_text().splitlines()
    )
    state_op = progress[-1]["stateOperators"][0]
    data_versions = [
        p["batchId"] + 1 for p in progress[1:]
    ]  # a batch's state version; no-data batches left out
    first_end = datetime.fromisoformat(progress[0]["timestamp"]).timestamp()
    first_end += progress[0]["durationMs"]["triggerExecution"] / 1000
    return {
        "batches": len(progress),
        "first_ms": progress[0]["durationMs"]["triggerExecution"],
        "batch_ms": statistics.median(p["durationMs"]["triggerExecution"] for p in progress[1:]),
        "state_disk": folder_bytes(ck / "state"),
        "per_batch": statistics.median(by_version.get(v, 0) for v in data_versions) if data_versions else 0,
        # everything written to the state folder after the first batch, snapshots (SST uploads) too
        "after_first": written_since(ck / "state", first_end) / max(1, len(progress) - 1),
        "first_batch": by_version.get(1, 0),
        "snapshots": other,
        "heap": heap,
        "jvm_rss": rss_kib(jvm_pid) * 1024,
        "python_rss": python_workers_kib() * 1024,
        "state_memory": state_op.get("memoryUsedBytes"),
        "state_rows": state_op.get("numRowsTotal"),
        "decisions": len(decisions),
        "decisions_hash": hashlib.sha256("\n".join(decisions).encode()).hexdigest(),
    }


def mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f} MiB"


def print_table(rows: list[dict]) -> None:
    print(
        "| store | layout | principals | driver heap | touched per batch | first batch | batch time (median) | state on disk | checkpoint per batch "
        "| of the first batch's | all state files per batch after the first (snapshots too) | snapshots (SST) | JVM heap after GC | JVM RSS | Python workers (PSS) "
        "| Spark memoryUsedBytes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        share = f"{r['per_batch'] / r['first_batch']:.1%}" if r.get("first_batch") else "-"
        print(
            f"| {r['store']} | {r['layout']} | {r['principals']:,} | {r['driver']} | {r['touch']:.0%} | {r['first_ms'] / 1000:.1f} s "
            f"| {r['batch_ms'] / 1000:.1f} s "
            f"| {mib(r['state_disk'])} | {mib(r['per_batch'])} | {share} | {mib(r['after_first'])} | {mib(r['snapshots'])} | {mib(r['heap'])} "
            f"| {mib(r['jvm_rss'])} | {mib(r['python_rss'])} | {mib(r['state_memory'])} |"
        )


def quota_costs() -> None:
    """One principal's state blob by quota, its filter full (R PIDs over the window)."""
    from pidquota.quota import PrincipalQuota, QuotaSettings

    settings = QuotaSettings()
    print("\n| producer_ids_rate | state blob | write (to_bytes) | read (from_bytes) |")
    print("|---|---|---|---|")
    for rate in (200, 1_000, 10_000, 65_536):
        pq = PrincipalQuota(rate, settings, T0)
        step = max(1, settings.window_ms // rate)
        for i in range(rate):
            pq.observe(T0 + i * step, i)
        t = time.perf_counter()
        blob = pq.to_bytes()
        write = time.perf_counter() - t
        t = time.perf_counter()
        PrincipalQuota.from_bytes(blob, settings)
        read = time.perf_counter() - t
        print(f"| {rate:,} | {len(blob) / 1024:,.1f} KiB | {write * 1000:.2f} ms | {read * 1000:.2f} ms |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--principals", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--stores", nargs="+", default=["hdfs", "rocksdb"])
    ap.add_argument(
        "--touch", type=float, default=1.0, help="share of principals in each batch after the first"
    )
    ap.add_argument(
        "--driver-memory",
        default="",
        help="pidquota.spark.driver.memory (empty: Spark's 1g); 1M principals need more",
    )
    ap.add_argument("--layouts", nargs="+", default=["groups"], choices=("groups", "principals"))
    ap.add_argument("--one", nargs=3, metavar=("STORE", "PRINCIPALS", "LAYOUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        store, principals, layout = args.one
        result = one_run(store, int(principals), args.batches, args.touch, args.driver_memory, layout)
        print("RESULT " + json.dumps(result), flush=True)
        return
    rows = []
    runs = [(s, lay) for s in args.stores for lay in args.layouts if (s, lay) != ("hdfs", "principals")]
    for principals in args.principals:
        for store, layout in runs:
            cmd = [sys.executable, __file__, "--one", store, str(principals), layout]
            cmd += [
                "--batches",
                str(args.batches),
                "--touch",
                str(args.touch),
                "--driver-memory",
                args.driver_memory,
            ]
            done = subprocess.run(cmd, capture_output=True, text=True)
            result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if not result:
                print(f"{store}/{layout} {principals}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
                continue
            rows.append(json.loads(result[0].removeprefix("RESULT ")))
            print("ROW state " + json.dumps(rows[-1]), flush=True)  # for benchmarks/streaming.py --all
            print(f"{store}/{layout} {principals:,}: done", file=sys.stderr, flush=True)
    print_table(rows)
    for principals in args.principals:
        same = {r["decisions_hash"] for r in rows if r["principals"] == principals}
        count = {r["decisions"] for r in rows if r["principals"] == principals}
        print(f"{principals:,} principals: decisions identical across runs: {len(same) == 1} ({count})")
    quota_costs()


if __name__ == "__main__":
    main()
