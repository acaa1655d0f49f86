"""Kafka-style sampled statistics for the per-principal metrics."""

from __future__ import annotations

import struct
from bisect import bisect_left

import numpy as np

_SAMPLE = struct.Struct("<qqqd")  # start_ms, admitted, throttled, throttle_ms_sum


class SampledStats:
    """``producer.id.quota.window.num`` samples of ``window.size`` each.

    Like Kafka's ``SampledStat``: a sample starts at the event time of the
    first record after the previous one ended, and a sample whose end is
    ``num * size`` before now is dropped. From the retained samples:

    * ``rate`` = admitted / max(elapsed, W) * W, in PIDs per W (the unit of
      ``producer_ids_rate``), where elapsed = now - start of the oldest sample.
      Kafka floors elapsed at (num - 1) samples, which shows a tenth of the
      truth for the first hours; we floor it at one window, so 100 PIDs
      admitted in the first minute read as 100 per window, not 10.
    * ``throttle_time_ms`` = average throttle time of the throttled PIDs.

    Example, W = 3600 s, num = 11: 30 PIDs admitted at 00:10 and 30 at 01:10
    give, at 02:00, rate = 60 / max(110 min, 60 min) * 60 min = 32.7 per hour.

    Samples are kept with the state. A restart with another ``window.size``
    drops them (:meth:`pidquota.quota.enforcer.PrincipalQuota.from_bytes`): an hour's
    sample cannot be split into minutes, and read as a minute's it would
    report 60 times the truth. A changed ``window.num`` just keeps the newest.
    """

    __slots__ = ("num", "size_ms", "samples")

    def __init__(self, num: int, size_ms: int) -> None:
        if num < 1 or size_ms < 1:
            raise ValueError(f"need num >= 1 and size_ms >= 1, got {num}, {size_ms}")
        self.num = num
        self.size_ms = size_ms
        self.samples: list[list] = []  # [start_ms, admitted, throttled, throttle_ms_sum]

    def _current(self, now_ms: int) -> list:
        if not self.samples or now_ms >= self.samples[-1][0] + self.size_ms:
            self.samples.append([now_ms, 0, 0, 0.0])
            self.purge(now_ms)
        return self.samples[-1]

    def purge(self, now_ms: int) -> None:
        horizon = now_ms - self.num * self.size_ms
        keep = [s for s in self.samples if s[0] + self.size_ms > horizon]
        self.samples = keep[-self.num :]

    def record_admit(self, now_ms: int) -> None:
        self._current(now_ms)[1] += 1

    def record_throttle(self, now_ms: int, throttle_ms: int) -> None:
        sample = self._current(now_ms)
        sample[2] += 1
        sample[3] += throttle_ms

    def record_many(self, times: np.ndarray, admitted: np.ndarray, waits: np.ndarray) -> None:
        """``record_admit`` or ``record_throttle`` for each verdict in order (``times``
        non-decreasing); one step per sample, not per verdict."""
        tl = times.tolist()
        i, n = 0, len(tl)
        while i < n:
            sample = self._current(tl[i])
            j = bisect_left(tl, sample[0] + self.size_ms, i)
            took = int(admitted[i:j].sum())
            sample[1] += took
            sample[2] += (j - i) - took
            sample[3] += int(waits[i:j][~admitted[i:j]].sum())
            i = j

    def rate(self, now_ms: int) -> float:
        self.purge(now_ms)
        if not self.samples:
            return 0.0
        elapsed = max(now_ms - self.samples[0][0], self.size_ms)
        return sum(s[1] for s in self.samples) * self.size_ms / elapsed

    def avg_throttle_ms(self, now_ms: int) -> float:
        self.purge(now_ms)
        throttled = sum(s[2] for s in self.samples)
        return sum(s[3] for s in self.samples) / throttled if throttled else 0.0

    def to_bytes(self) -> bytes:
        return struct.pack("<I", len(self.samples)) + b"".join(
            _SAMPLE.pack(int(s[0]), int(s[1]), int(s[2]), float(s[3])) for s in self.samples
        )

    def load(self, buf: memoryview, offset: int) -> int:
        (n,) = struct.unpack_from("<I", buf, offset)
        offset += 4
        if offset + n * _SAMPLE.size > len(buf):
            raise ValueError("metric samples are truncated")
        self.samples = [list(_SAMPLE.unpack_from(buf, offset + i * _SAMPLE.size)) for i in range(n)]
        return offset + n * _SAMPLE.size
