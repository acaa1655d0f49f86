"""A simulated Kafka cluster, clock-free: every call takes the event time ``now_ms``.

* :class:`Controller` hands out KIP-730 blocks through a :class:`BlockStore`,
  at most ``blocks_per_s`` per second (a token bucket; over it the broker
  waits the throttle time and retries).
* :class:`Broker` gives each new idempotent producer the next PID of its
  current block and asks for a new block when it runs out. A restart bumps
  its epoch and drops the rest of its block, as a real broker loses it.
* :class:`TransactionCoordinator` follows KIP-360 for ``InitProducerId``:
  a transactional producer keeps its PID and the epoch is bumped; a retry
  carrying the epoch from before the bump gets the current epoch back, no
  second bump; any older epoch is fenced with ``INVALID_PRODUCER_EPOCH``.
* :class:`Cluster` holds the brokers and partition leadership, which moves
  over time and away from a failed broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pidquota.conf.errors import PidquotaError
from pidquota.quota.bucket import TokenBucket
from pidquota.traffic.blocks import BLOCK_SIZE, BlockStore, ProducerIdBlock

MAX_EPOCH = 32_767


class InvalidProducerEpochError(PidquotaError):
    """``INVALID_PRODUCER_EPOCH``: a zombie producer with a stale epoch is fenced."""

    code = "INVALID_PRODUCER_EPOCH"


class Controller:
    """The active controller's side of ``AllocateProducerIds``."""

    def __init__(self, store: BlockStore, blocks_per_s: float = 10.0, now_ms: int = 0) -> None:
        self.store = store
        self.bucket = TokenBucket(blocks_per_s, 1000, now_ms)
        self.throttled = 0

    def register_broker(self, broker_id: int) -> int:
        return self.store.register_broker(broker_id)

    def allocate_producer_ids(
        self, broker_id: int, broker_epoch: int, now_ms: int
    ) -> tuple[ProducerIdBlock, int]:
        """Return the block and the event time it was granted (after any throttling).

        A stale epoch raises ``StaleBrokerEpochError`` at once; rate limiting
        only delays, as a throttled broker retries after the throttle time.
        """
        now_ms = max(now_ms, self.bucket.last_ms)  # the controller serves requests in its own time order
        wait = self.bucket.try_take(now_ms)
        if wait:
            self.throttled += 1
            now_ms += wait
            self.bucket.refill(now_ms)
            self.bucket.credit -= self.bucket.window_ms
        return self.store.allocate(broker_id, broker_epoch, BLOCK_SIZE), now_ms


@dataclass
class Broker:
    broker_id: int
    controller: Controller
    epoch: int = -1
    alive: bool = True
    block: ProducerIdBlock | None = None
    next_pid: int = 0
    blocks: list[ProducerIdBlock] = field(default_factory=list)

    def start(self) -> None:
        """(Re)start: register with the controller (new epoch), no block yet."""
        self.epoch = self.controller.register_broker(self.broker_id)
        self.block, self.alive = None, True

    def allocate_pid(self, now_ms: int) -> tuple[int, int]:
        """The next PID for a new producer, and the time it is granted."""
        if self.block is None or self.next_pid > self.block.block_end:
            self.block, now_ms = self.controller.allocate_producer_ids(self.broker_id, self.epoch, now_ms)
            self.blocks.append(self.block)
            self.next_pid = self.block.start
        pid = self.next_pid
        self.next_pid += 1
        return pid, now_ms


class TransactionCoordinator:
    """Per transactional.id: [producer_id, epoch, epoch before the last bump]."""

    def __init__(self) -> None:
        self.state: dict[str, list] = {}
        self.bumps = self.retries = self.fenced = 0

    def init_producer_id(
        self, txn_id: str, broker: Broker, now_ms: int, epoch: int | None = None
    ) -> tuple[int, int, int]:
        """``InitProducerId``: return (producer_id, epoch, granted at).

        ``epoch`` is the epoch the producer holds (None for a fresh instance,
        which fences any older one).
        """
        cur = self.state.get(txn_id)
        if cur is None or cur[1] >= MAX_EPOCH:  # new id, or epoch exhausted: a new PID
            pid, now_ms = broker.allocate_pid(now_ms)
            self.state[txn_id] = [pid, 0, None]
            return pid, 0, now_ms
        pid, current, previous = cur
        if epoch is None or epoch == current:
            self.state[txn_id] = [pid, current + 1, current]
            self.bumps += 1
            return pid, current + 1, now_ms
        if epoch == previous:  # the response to the bump was lost; this is its retry
            self.retries += 1
            return pid, current, now_ms
        self.fenced += 1
        raise InvalidProducerEpochError(
            f"INVALID_PRODUCER_EPOCH: {txn_id!r} holds epoch {epoch}, current epoch is {current}"
        )

    def check_produce(self, txn_id: str, epoch: int) -> None:
        """A produce request with a stale epoch is fenced."""
        current = self.state[txn_id][1]
        if epoch != current:
            self.fenced += 1
            raise InvalidProducerEpochError(
                f"INVALID_PRODUCER_EPOCH: {txn_id!r} produced with epoch {epoch}, current epoch is {current}"
            )


class Cluster:
    """Brokers, partition leadership and the coordinators.

    ``partitions_per_broker`` partitions start led round-robin. Every
    ``move_every_ms`` one partition's leadership moves to another live broker;
    every ``fail_every_ms`` a broker fails for ``down_ms`` (its partitions move
    to the others and its producers reconnect there), then restarts with a new
    epoch. KIP-936's six-broker scenario is this with 6 brokers.
    """

    def __init__(
        self,
        controller: Controller,
        brokers: int,
        rng: np.random.Generator,
        partitions_per_broker: int = 4,
        move_every_ms: int = 5 * 60_000,
        fail_every_ms: int = 40 * 60_000,
        down_ms: int = 3 * 60_000,
    ) -> None:
        if brokers < 1:
            raise PidquotaError(f"--brokers must be >= 1, got {brokers}")
        self.controller = controller
        self.rng = rng
        self.brokers = [Broker(i, controller) for i in range(brokers)]
        for b in self.brokers:
            b.start()
        self.leaders = np.arange(brokers * partitions_per_broker) % brokers
        self.coordinator = TransactionCoordinator()
        self.move_every_ms, self.fail_every_ms, self.down_ms = move_every_ms, fail_every_ms, down_ms
        self._next_move = move_every_ms
        self._next_fail = fail_every_ms
        self._down: dict[int, int] = {}  # broker id -> restart time
        self.moves = self.failures = 0

    @property
    def partitions(self) -> int:
        return len(self.leaders)

    def alive(self) -> list[int]:
        return [b.broker_id for b in self.brokers if b.alive]

    def advance(self, now_ms: int, origin_ms: int) -> None:
        """Apply leadership moves, failures and restarts due by ``now_ms``."""
        for bid, back in list(self._down.items()):
            if back <= now_ms:
                self.brokers[bid].start()
                del self._down[bid]
        while origin_ms + self._next_move <= now_ms:
            self._next_move += self.move_every_ms
            alive = self.alive()
            if len(alive) > 1:
                p = int(self.rng.integers(self.partitions))
                self.leaders[p] = int(self.rng.choice([b for b in alive if b != self.leaders[p]]))
                self.moves += 1
        while origin_ms + self._next_fail <= now_ms:
            self._next_fail += self.fail_every_ms
            alive = self.alive()
            if len(alive) > 1:
                victim = int(self.rng.choice(alive))
                self.brokers[victim].alive = False
                self._down[victim] = now_ms + self.down_ms
                others = [b for b in alive if b != victim]
                moved = self.leaders == victim
                self.leaders[moved] = self.rng.choice(others, size=int(moved.sum()))
                self.failures += 1

    def any_broker(self, rng: np.random.Generator) -> Broker:
        """A live broker for a producer's InitProducerId."""
        return self.brokers[int(rng.choice(self.alive()))]
