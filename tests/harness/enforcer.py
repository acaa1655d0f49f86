"""The real query run once (availableNow) on a folder of events, like ``pidquota run --once``, in the
tests' shared SparkSession."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from pidquota.conf.loader import load
from pidquota.streaming.outputs.reader import read_output


def write_events(path: Path, events: list) -> Path:
    """Write events (dicts, or raw strings written as they are) as JSON lines, the way a writer
    should for a running query: under a hidden name (``.tmp``), renamed when complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".tmp")
    with part.open("w", encoding="utf-8") as f:
        for e in events:
            f.write((e if isinstance(e, str) else json.dumps(e)) + "\n")
    os.replace(part, path)
    return path


class Enforcer:
    """Runs the real query once (availableNow) on a folder, like ``run --once``."""

    def __init__(self, spark, tmp: Path, quotas: dict, replay_until: int | None = None, **settings):
        from pidquota.quota import StaticQuotas

        self.spark, self.tmp = spark, tmp
        self.input, self.out = tmp / "in", tmp / "out"
        self.input.mkdir(parents=True, exist_ok=True)
        # the compiled judge from the first batch, as a flood has it: the tests' few events would
        # else be judged in numpy alone (pidquota.compiled.after), and the group pass never run in Spark
        defaults = {"pidquota.spark.shuffle.partitions": "2", "pidquota.compiled.after": "0"}
        self.config = load(overrides={**defaults, **settings}, environ={})
        self.quotas = StaticQuotas(quotas)
        self.screen = self.config["pidquota.principal.max.length"]  # as the CLI: lines screened in the source
        self.last_progress = None
        self.replay_until = replay_until  # as run --replay-until
        self.act = None  # the actuator the sink hands each batch to (runner.BatchActuator's interface)

    def run(self, events: list, name: str = "events") -> dict[str, pd.DataFrame]:

        n = len(list(self.input.glob("*.jsonl")))
        write_events(self.input / f"{n:03d}-{name}.jsonl", events)
        return self._run(self._files(0))

    def run_batches(self, batches: list[list], name: str = "events") -> dict[str, pd.DataFrame]:
        """Write each list of events as a file and run once, one file per micro-batch."""

        n = len(list(self.input.glob("*.jsonl")))
        for k, events in enumerate(batches):
            write_events(self.input / f"{n + k:03d}-{name}.jsonl", events)
        return self._run(self._files(1))

    def run_lines(self, lines: list, name: str = "lines") -> dict[str, pd.DataFrame]:
        """Write raw records (str or bytes, one per line) as they are, and run on the folder."""

        n = len(list(self.input.glob("*.jsonl")))
        data = [x if isinstance(x, bytes) else x.encode("utf-8") for x in lines]
        (self.input / f"{n:03d}-{name}.jsonl").write_bytes(b"\n".join(data) + b"\n")
        return self._run(self._files(0))

    def _files(self, max_files: int):
        """The input folder as the CLI reads it: in the configured format, followed or not."""
        from pidquota.streaming import query as q

        fmt, follow = q.input_format(self.config), q.follows(self.config)
        ck = str(self.out / "_ck")
        return q.file_source(
            self.spark, str(self.input), max_files, ck, screen=self.screen, fmt=fmt, follow=follow
        )

    def follow(self, folder: Path, trigger_ms: int = 500):
        """The real query running on ``folder`` (followed in its format, as ``pidquota run``
        without ``--once``), into this runner's outputs; the caller stops it."""
        from pidquota.streaming import query as q
        from pidquota.streaming.outputs.sink import JsonlSink

        self.input = folder
        output = q.enforcer(self._files(0), self.config, self.quotas)
        return q.start(output, JsonlSink(self.out), str(self.out / "_ck"), False, trigger_ms)

    def run_kafka(self, url: str, kafka_out: dict | None = None) -> dict[str, pd.DataFrame]:
        """Everything available in a Kafka topic, like ``run --input kafka://... --once``."""
        from pidquota.store.kafka import KafkaUrl
        from pidquota.streaming import query as q
        from pidquota.streaming.outputs.kafka import KafkaDataSource

        self.spark.dataSource.register(KafkaDataSource)
        return self._run(
            q.kafka_source(self.spark, KafkaUrl.parse(url), self.config, screen=self.screen), kafka_out
        )

    def _run(self, lines, kafka_out: dict | None = None) -> dict[str, pd.DataFrame]:
        from pidquota.formats.recognise import FormatGuard
        from pidquota.streaming import query as q
        from pidquota.streaming.outputs.sink import JsonlSink

        # the CLI's sink: the format guard re-reads the first dead letters (issue 44's poison pill was there)
        guard = FormatGuard(self.config["pidquota.input.format"], "the test's input")
        sink = JsonlSink(self.out, kafka=kafka_out, replay_until=self.replay_until, guard=guard, act=self.act)
        output = q.enforcer(lines, self.config, self.quotas, replay_until=self.replay_until)
        query = q.start(output, sink, str(self.out / "_ck"), True, 0)
        try:
            query.awaitTermination()
        finally:
            self.last_progress = query.recentProgress
        return {k: read_output(self.out, k) for k in ("decisions", "metrics", "dead-letters", "skipped")}
