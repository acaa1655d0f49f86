"""A normal restart of pidquota during a flood, through the broker plug-in: how many new PIDs the
offender is granted while pidquota restarts, with its throttles handed over to the next run and
without (issue 53).

    python benchmarks/restart.py [--version 4.1.1] [--settle 20]

Starts a one-node broker that runs pidquota's plug-in (scripts/kafka_broker.py, the request
log at DEBUG), and a kafka-python crash loop of ``User:crash-loop`` (a new producer per record)
for the whole run. For each of ``pidquota.actuator.plugin.hand.over`` true and false:
``pidquota run --follow`` on the request log with the actuator on (broker-plugin, the user's
quota 5 new PIDs per W = 60 s) until the broker refuses the user, then Ctrl-C (a normal stop),
and the same run again on the same output and checkpoint, until ``--settle`` seconds after its
first batch. The grants counted are the user's InitProducerIds the broker answered without an
error (its request log), from the Ctrl-C to the end, against the quota per W. Prints them;
asserts nothing.
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # scripts.*, benchmarks.*
sys.path.insert(0, str(ROOT / "tests"))  # harness.plugin

from benchmarks.actuation import QUOTA, WINDOW_S, _utc_offset_s, crash_loop  # noqa: E402
from scripts.kafka_broker import Cluster  # noqa: E402

USER = "crash-loop"


def _inits(log: Path) -> list[tuple[float, int]]:
    """The user's InitProducerIds in the request log: (broker time in s, error code)."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if '"requestApiKeyName":"INIT_PRODUCER_ID"' not in line or f'"User:{USER}"' not in line:
            continue
        body = json.loads(line[line.index("{") : line.rindex("}") + 1])
        stamp = line[1:24]
        at = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:23]) / 1000
        out.append((at - _utc_offset_s(), (body.get("response") or {}).get("errorCode", 0)))
    return out


def _start(cluster: Cluster, out: Path, quotas: Path, hand_over: bool, log) -> subprocess.Popen:
    cmd = [
        sys.executable, "-m", "pidquota", "run",
        "--input", str(cluster.nodes[0].logs), "--input-format", "kafka-request-log", "--follow",
        "--output", str(out), "--quotas", str(quotas),
        "--set", f"producer.id.quota.window.size.seconds={WINDOW_S}",
        "--set", "pidquota.trigger.interval.ms=1000", "--set", "pidquota.actuator=on",
        "--set", f"pidquota.actuator.bootstrap={cluster.bootstrap}",
        "--set", "pidquota.actuator.mechanism=broker-plugin",
        "--set", "pidquota.actuator.principal=User:ANONYMOUS",  # PLAINTEXT's, a super user: the state topic's guard
        "--set", "pidquota.actuator.plugin.narrow=false",
        "--set", f"pidquota.actuator.plugin.hand.over={'true' if hand_over else 'false'}",
    ]  # fmt: skip
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _batches(out: Path) -> int:
    return len(list((out / "metrics").glob("*.jsonl"))) if (out / "metrics").exists() else 0


def _until(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.5)


def one(cluster: Cluster, tmp: Path, hand_over: bool, settle_s: float) -> tuple[int, float]:
    """One restart: the grants from the Ctrl-C to ``settle_s`` after the next run's first batch,
    and that span in s."""
    out, quotas = tmp / f"out-{hand_over}", tmp / "quotas.json"
    log = open(tmp / f"run-{hand_over}.log", "w")  # noqa: SIM115
    request_log = cluster.nodes[0].request_log
    started = time.time()
    first = _start(cluster, out, quotas, hand_over, log)
    try:
        _until(lambda: any(t > started and e == 31 for t, e in _inits(request_log)), 240, "a first refusal")
        time.sleep(5)
    finally:
        stopped = time.time()
        os.killpg(first.pid, signal.SIGINT)
        first.wait(120)
    had = _batches(out)
    second = _start(cluster, out, quotas, hand_over, log)
    try:
        _until(lambda: _batches(out) > had, 240, "the next run's first batch")
        time.sleep(settle_s)
    finally:
        ended = time.time()
        os.killpg(second.pid, signal.SIGINT)
        second.wait(120)
        log.close()
    granted = sum(1 for t, e in _inits(request_log) if stopped <= t <= ended and e == 0)
    lift = subprocess.run(
        [
            sys.executable,
            "-m",
            "pidquota",
            "actuator",
            "lift",
            "--bootstrap",
            cluster.bootstrap,
            "--set",
            "pidquota.actuator.principal=User:ANONYMOUS",
        ],  # fmt: skip
        capture_output=True,
        text=True,
    )
    if lift.returncode != 0:
        print(f"  (lift: {lift.stdout}{lift.stderr})")
    time.sleep(2)
    return granted, ended - stopped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default="4.1.1", help="Apache Kafka version (default 4.1.1)")
    ap.add_argument(
        "--settle", type=float, default=20.0, help="seconds after the next run's first batch (20)"
    )
    args = ap.parse_args(argv)
    from harness.plugin import plugin_jar

    with tempfile.TemporaryDirectory(prefix="pidquota-restart-") as tmp:
        tmp = Path(tmp)
        cluster = Cluster(tmp / "kafka", kafka_version=args.version, plugin=plugin_jar())
        cluster.start()
        stop = threading.Event()
        (tmp / "quotas.json").write_text(
            json.dumps({"users": {f"User:{USER}": {"producer_ids_rate": QUOTA}}})
        )
        loop = threading.Thread(
            target=lambda: [crash_loop(cluster, USER, 1) for _ in iter(stop.is_set, True)]
        )
        loop.start()
        try:
            for hand_over in (False, True):
                granted, span = one(cluster, tmp, hand_over, args.settle)
                print(
                    f"hand.over={str(hand_over).lower()}: {granted} new PIDs granted to User:{USER} in the "
                    f"{span:.0f} s from Ctrl-C to {args.settle:g} s after the next run's first batch "
                    f"(quota {QUOTA} per W = {WINDOW_S} s: {granted / QUOTA:.1f}x)",
                    flush=True,
                )
        finally:
            stop.set()
            loop.join(30)
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
