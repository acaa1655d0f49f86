"""Verdicts on unseen PIDs: one at a time (:class:`Decision`), or a batch's in columns."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

ADMIT = "ADMIT"
THROTTLE = "THROTTLE"


class Decision(NamedTuple):
    """The verdict on one sighting of a previously unseen PID."""

    producer_id: int
    producer_epoch: int
    timestamp: int
    verdict: str
    throttle_time_ms: int
    tokens: float


class Decisions:
    """A batch's verdicts as columns, in the order they were made.

    ``admitted`` is True for ADMIT and False for THROTTLE; the other columns
    are :class:`Decision`'s, and ``rows()[i]`` is row ``i`` as a Decision.
    """

    __slots__ = ("producer_id", "producer_epoch", "timestamp", "admitted", "throttle_time_ms", "tokens")

    def __init__(self, producer_id, producer_epoch, timestamp, admitted, throttle_time_ms, tokens) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.timestamp = timestamp
        self.admitted = admitted
        self.throttle_time_ms = throttle_time_ms
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.producer_id)

    @classmethod
    def empty(cls) -> Decisions:
        i = np.empty(0, dtype=np.int64)
        return cls(i, i, i, np.empty(0, dtype=bool), i, np.empty(0, dtype=np.float64))

    def rows(self) -> list[Decision]:
        verdicts = (THROTTLE, ADMIT)
        return [
            Decision(p, e, t, verdicts[a], w, k)
            for p, e, t, a, w, k in zip(
                self.producer_id.tolist(),
                self.producer_epoch.tolist(),
                self.timestamp.tolist(),
                self.admitted.tolist(),
                self.throttle_time_ms.tolist(),
                self.tokens.tolist(),
                strict=True,
            )
        ]
