"""The stateful operator alone, outside Spark: ``streaming/operator.py``'s state function
over ``benchmarks/streaming.py``'s inputs, folded as the source folds them.

    python benchmarks/operator.py [--input flood|realistic] [--events 1000000] [--profile tottime]

``--events`` events from 500 principals over 2 hours (``streaming.traffic``, what it writes),
in 10 batches; each batch is folded one row per principal per input partition (two, as
two cores read it) and grouped into ``pidquota.state.buckets`` groups by a CRC of the
principal (Spark's xxhash64 spreads them alike). Each group's state is kept between batches
as ``applyInPandasWithState`` keeps it. Prints the operator's CPU-seconds, best of three,
and per principal and batch: what the enforcer's Python operator costs before Spark's own
conversions, the number issue 43 needed to know where the flood's time goes. It runs twice,
side by side: with the numpy judge alone (``quota/batch.py``, the one-at-a-time path for
small batches) and with the compiled kernel (``quota/kernel.py``, issue 55), and says whether
their verdicts are identical. ``--profile
tottime`` (or ``cumtime``) prints cProfile's top instead. Asserts nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* from the root

from benchmarks.streaming import traffic  # noqa: E402
from pidquota.conf.loader import load  # noqa: E402
from pidquota.quota import QuotaSettings, StaticQuotas, enforcer, group  # noqa: E402
from pidquota.streaming.columns import DECISION_ARRAYS, PACKED  # noqa: E402
from pidquota.streaming.operator import make_state_function  # noqa: E402

FILES, PARTITIONS = 10, 2
COLUMNS = ["principal", "producer_ids", "timestamps", "epochs", "client_pids", "clients", "dead"]


class GroupState:
    """What the state function reads and writes of Spark's ``GroupState``."""

    def __init__(self, watermark: int) -> None:
        self.blob, self.watermark, self.hasTimedOut = None, watermark, False

    @property
    def exists(self) -> bool:
        return self.blob is not None

    @property
    def get(self) -> tuple:
        return (self.blob,)

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 (Spark's name)
        return self.watermark

    def update(self, value: tuple) -> None:
        self.blob = value[0]

    def setTimeoutTimestamp(self, ms: int) -> None:  # noqa: N802 (Spark's name)
        pass

    def remove(self) -> None:
        self.blob = None


def batches(n: int, flood: bool, groups: int, delay_ms: int) -> list[tuple[dict, int]]:
    """Per batch: the operator's input frame per group, and the watermark."""
    ts, principal, pid = traffic(n, flood)
    out = []
    for idx in np.array_split(np.arange(n), FILES):
        rows: dict[str, list] = {}
        for part in np.array_split(idx, PARTITIONS):
            order = np.argsort(principal[part], kind="stable")
            who, t, p = principal[part][order], ts[part][order], pid[part][order]
            names, starts = np.unique(who, return_index=True)
            for k, b, e in zip(
                names.tolist(), starts.tolist(), [*starts[1:].tolist(), len(who)], strict=True
            ):
                name = f"User:u{k}"
                group = f"#{zlib.crc32(name.encode()) % groups}"
                rows.setdefault(group, []).append(
                    (name, p[b:e], t[b:e], np.zeros(e - b, np.int32), None, None, None)
                )
        frames = {g: pd.DataFrame(r, columns=COLUMNS) for g, r in rows.items()}
        out.append((frames, int(ts[idx].max()) - delay_ms))
    return out


def run(judge, inputs, keep: list | None = None, states: dict | None = None) -> int:
    """The state function over every batch and group, the states kept between batches;
    ``keep``: a list that gets each output frame; ``states``: a dict that gets the groups' states."""
    states = {} if states is None else states
    rows = 0
    for frames, watermark in inputs:
        for key, pdf in frames.items():
            state = states.setdefault(key, GroupState(watermark))
            state.watermark = watermark
            for out in judge((key,), iter([pdf]), state):
                rows += len(out)
                if keep is not None:
                    keep.append(out)
    return rows


def verdicts(frames: list[pd.DataFrame]) -> list[tuple]:
    """Every verdict of a run's output, as (principal, the decision fields...), in order."""
    out = []
    for frame in frames:
        columns = [frame[DECISION_ARRAYS[name]] for name in PACKED]
        for principal, *packed in zip(frame["principal"], *columns, strict=True):
            if packed[0] is not None:
                arrays = [
                    np.frombuffer(b, dtype).tolist() for b, dtype in zip(packed, PACKED.values(), strict=True)
                ]
                out += [(principal, *v) for v in zip(*arrays, strict=True)]
    return out


def timed(judge, inputs) -> float:
    """The operator's CPU-seconds over all batches, best of 3."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        run(judge, inputs)
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", choices=["flood", "realistic"], default="flood")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--profile", choices=["tottime", "cumtime"], help="cProfile's top, sorted so")
    args = parser.parse_args()
    config = load()
    judge = make_state_function(StaticQuotas({"<default>": 100}), QuotaSettings.from_config(config))
    inputs = batches(
        args.events,
        args.input == "flood",
        config["pidquota.state.buckets"],
        config["pidquota.watermark.delay.ms"],
    )
    calls = sum(len(pdf["principal"].unique()) for frames, _ in inputs for pdf in frames.values())
    if args.profile:
        run(judge, inputs)  # warm: imports and the kernel's load are not the operator's steady cost
        profile = cProfile.Profile()
        profile.runcall(run, judge, inputs)
        pstats.Stats(profile).sort_stats(args.profile).print_stats(30)
        return
    found, times, kept = {}, {}, {}
    for mode in MODES:  # side by side: the numpy judge, the compiled kernel, the group pass
        enforcer.use_kernel, group.use_group = mode != "numpy", mode == "group"
        frames: list[pd.DataFrame] = []
        kept[mode] = {}
        run(judge, inputs, frames, kept[mode])
        found[mode], times[mode] = verdicts(frames), timed(judge, inputs)
    for mode in MODES:
        best = times[mode]
        print(
            f"{args.input}, {MODES[mode]}: {args.events:,} events, {calls:,} principal-batches: {best:.2f} CPU-s, "
            f"{best / calls * 1000:.3f} ms per principal and batch (best of 3)"
        )
    same = found["kernel"] == found["numpy"] == found["group"]
    states = {g: s.blob for g, s in kept["kernel"].items()} == {g: s.blob for g, s in kept["group"].items()}
    print(
        f"  kernel / numpy judge: {times['kernel'] / times['numpy']:.2f} of the time, group pass / numpy judge: "
        f"{times['group'] / times['numpy']:.2f}; verdicts identical: {same} ({len(found['group']):,} verdicts); "
        f"the group pass's states byte for byte the kernel's: {states}"
    )


MODES = {
    "numpy": "numpy judge",
    "kernel": "compiled kernel, a principal at a time (quota/kernel.py)",
    "group": "group pass (quota/group.py)",
}


if __name__ == "__main__":
    main()
