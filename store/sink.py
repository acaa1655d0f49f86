"""Publishing each micro-batch's throttle state to Redis from the sink."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from store.decisions import DecisionStore

log = logging.getLogger("pidquota.redis")


class RedisPublisher:
    """``publish(batch_id, frames)`` for :class:`streaming.sink.JsonlSink`.

    The query id comes from the checkpoint's ``metadata`` file, which Spark
    writes before the first batch and keeps across restarts, so a restarted
    query and any zombie twin share it and are fenced against each other.
    """

    def __init__(self, store: DecisionStore, checkpoint: str | None = None) -> None:
        self.store = store
        self.checkpoint = checkpoint
        self._query_id: str | None = None
        self.fenced = 0

    @property
    def query_id(self) -> str:
        if self._query_id is None:
            meta = Path(self.checkpoint or "") / "metadata"
            self._query_id = json.loads(meta.read_text().splitlines()[0])["id"]
        return self._query_id

    def __call__(self, batch_id: int, frames: dict) -> None:
        applied = self.store.apply(
            self.query_id,
            batch_id,
            frames["decisions"].to_dict("records"),
            frames["metrics"].to_dict("records"),
        )
        if not applied:
            self.fenced += 1
            log.warning(
                "batch %d of query %s was already applied in Redis; not applied again",
                batch_id,
                self.query_id,
            )
