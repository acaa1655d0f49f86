"""KIP-936's caching layer: a layered, timestamped Bloom filter of PIDs."""

from __future__ import annotations

import math
import struct

import numpy as np

from pidquota.bloom.hashing import LEGACY, MIX64, Mix64
from pidquota.bloom.layer import TimestampedBloomFilter
from pidquota.conf.errors import CorruptStateError

MAGIC = b"LBF"
# v2: each layer is preceded by its hash kind (one byte); v1 layers are all LEGACY
VERSION = 2
# window_ms, layer_count, error_rate, number of layers
_HEADER = struct.Struct("<3sBqIdI")

# A base layer never holds fewer PIDs than this, so a tiny quota (say 0.5 PIDs
# per window) does not roll a new layer on every second PID; nor more than
# MAX_BASE_CAPACITY, so a huge quota does not allocate megabytes up front
# (layers that fill up grow geometrically instead, see LayeredBloomFilter).
MIN_LAYER_CAPACITY = 32
# A batch of up to this many PIDs keeps their bit positions per layer shape (8 B each,
# k of them per PID: 4096 x 30 slices at most ~1 MiB a shape)
_CACHED_PIDS = 4096
MAX_BASE_CAPACITY = 65_536
MAX_LAYER_CAPACITY = 1 << 24


class PidHashes:
    """A batch's PIDs, hashed once (:meth:`Mix64.seeds`), and their bit positions.

    A small batch (up to ``_CACHED_PIDS`` PIDs) keeps every
    PID's positions per layer shape, so each further test is one gather; a
    large one tests slice by slice (:meth:`Mix64.member`), computing only
    the positions it needs.
    """

    __slots__ = ("pids", "seeds", "_small", "_positions")

    def __init__(self, pids: np.ndarray) -> None:
        self.pids = pids
        self.seeds = Mix64.seeds(pids)
        self._small = len(pids) <= _CACHED_PIDS
        self._positions: dict[tuple[int, int, int], np.ndarray] = {}

    def positions(self, layer: TimestampedBloomFilter, rows) -> np.ndarray:
        """The bit positions in ``layer`` of the PIDs of ``rows`` (a slice or indexes), one row each."""
        if not self._small:
            return layer.positions_many(self.pids[rows], self.seeds[rows])
        pos = self._positions.get(layer.shape)
        if pos is None:
            pos = self._positions[layer.shape] = layer.positions_many(self.pids, self.seeds)
        return pos[rows]

    def has(self, layer: TimestampedBloomFilter, rows, buffer: np.ndarray | None = None) -> np.ndarray:
        """Is each PID of ``rows`` in ``layer`` (or in ``buffer``, bits of the layer's shape)?"""
        buf = layer.buffer() if buffer is None else buffer
        if self._small or layer.kind != MIX64:
            return TimestampedBloomFilter.bits_in(buf, self.positions(layer, rows)).all(axis=1)
        _, slices, per_slice = layer.shape
        return Mix64.member(buf, self.seeds[rows], slices, per_slice)


def layer_capacity(rate: float) -> int:
    """KIP-936 *builder* sizing: a base layer holds the principal's quota R.

    A layer lives for ``window / layer_count`` of event time and takes the
    newly admitted PIDs (at most R in a burst, R / layer_count after that)
    plus the refreshed active ones, so R is the natural unit, clamped to
    [MIN_LAYER_CAPACITY, MAX_BASE_CAPACITY].
    """
    return min(MAX_BASE_CAPACITY, max(MIN_LAYER_CAPACITY, math.ceil(rate)))


class LayeredBloomFilter:
    """Per-principal set of recently seen PIDs that forgets by event time.

    Three KIP-936 hooks, all driven by the caller's ``now_ms``:

    * **builder** -- a new layer has ``layer_capacity(rate)`` PIDs at the
      configured false-positive rate (see :class:`TimestampedBloomFilter`).
    * **extendCheck** -- a write goes to a new layer when there is none, the
      newest is full, or the newest is ``span = window / layer_count`` old.
    * **cleanup** -- a layer whose newest write is older than the window
      (``now - last_insert_ms > window``) is dead: ``contains`` ignores it at
      once and :meth:`cleanup` frees it.

    A PID seen again is refreshed into the newest layer (KIP-936's rejected
    alternative 8), so a producer that keeps producing is never forgotten.
    Because writes to a layer stop ``span`` after it is created, a PID last
    seen at ``t`` sits in a layer with ``t <= last_insert_ms < t + span``, so
    it is forgotten after ``t + window`` and no later than
    ``t + window + span``. Example: window 3600 s, 4 layers, span 900 s; a PID
    last seen at 10:00 is still known at 11:00 and gone by 11:15.

    False positives: a PID counts as known if *any* live layer matches. With
    the configured rate p, a base layer is built for ``p / (layer_count + 1)``,
    since ``layer_count + 1`` time-rolled layers are alive at once, so their
    combined rate is at most ~p. A layer that fills before its span ends is
    followed by one of twice the capacity and half the rate (a scalable Bloom
    filter), so a run of early rolls adds at most another ~p in all. This
    matters under a flood of new PIDs: every false positive is refreshed into
    the newest layer, and with fixed-size layers those refreshes would roll
    ever more layers and push the false-positive rate towards 1. Example:
    p = 0.01, 4 layers: base layers at 0.002 (13 bits per PID); a flood of
    100 new PIDs/s against R = 100 rolls about 5 growing layers per span and
    lets ~1-2% of the flood through, instead of a runaway.
    """

    __slots__ = ("window_ms", "layer_count", "error_rate", "layers", "_newest_cache", "span_ms")

    def __init__(self, window_ms: int, layer_count: int, error_rate: float) -> None:
        if window_ms < 1:
            raise ValueError(f"window must be >= 1 ms, got {window_ms}")
        if not 1 <= layer_count <= 255:
            raise ValueError(f"layer count must be in 1..255, got {layer_count}")
        if not 0.0 < error_rate < 1.0:
            raise ValueError(f"false-positive rate must be in (0, 1), got {error_rate}")
        self.window_ms = int(window_ms)
        self.layer_count = int(layer_count)
        self.error_rate = float(error_rate)
        self.span_ms = max(1, self.window_ms // self.layer_count)
        self.layers: list[TimestampedBloomFilter] = []  # oldest first
        # PIDs known to sit in the current newest layer: a repeat sighting in
        # the same layer costs one dict lookup instead of hashing. Cleared on
        # every roll, so it is exact, not a heuristic.
        self._newest_cache: set[int] = set()

    def configure(
        self, window_ms: int, layer_count: int, error_rate: float, now_ms: int | None = None
    ) -> None:
        """Adopt the settings in force now (on restart), keeping the live layers.

        With ``now_ms`` (the state's event time when it was saved), layers
        already dead at ``now_ms`` under the *old* window are dropped first:
        their PIDs were forgotten, and a longer window must not bring them
        back. The live layers keep their times, so under the new window W'
        and span S' = W' / layer_count' a PID last seen at t is still known
        until t + W' (never forgotten early). It is forgotten by
        t + W' + S', except that a layer written under the old span S keeps
        its PIDs until t + W' + S at most: a layer's times cannot say when
        each PID in it was seen, and forgetting sooner could forget one early.
        Nothing is kept longer than that, and new layers follow S'.
        Example: W 3600 s -> 60 s, a PID seen 2 minutes before the restart is
        forgotten at once, one seen 10 s before is known for 50 s more.
        """
        if now_ms is not None:
            self.cleanup(now_ms)
        self.window_ms, self.layer_count, self.error_rate = (
            int(window_ms),
            int(layer_count),
            float(error_rate),
        )
        self.span_ms = max(1, self.window_ms // self.layer_count)

    # -- the caching layer's operations --------------------------------------------
    def _alive(self, layer: TimestampedBloomFilter, now_ms: int) -> bool:
        return now_ms - layer.last_insert_ms <= self.window_ms

    def writable(self, now_ms: int) -> TimestampedBloomFilter | None:
        """The newest layer if a write at ``now_ms`` may go to it (written with the current
        hash, not full, younger than the span, alive), else None: the write rolls a new one."""
        if not self.layers:
            return None
        newest = self.layers[-1]
        if newest.kind != MIX64 or newest.is_full or now_ms - newest.created_ms >= self.span_ms:
            return None
        if not self._alive(newest, now_ms):
            return None
        return newest

    def _probe(self, pid: int, now_ms: int, skip_newest: bool) -> bool:
        cache: dict[tuple[int, int, int], tuple[int, ...]] = {}
        layers = self.layers[:-1] if skip_newest else self.layers
        for layer in reversed(layers):
            if not self._alive(layer, now_ms):
                continue
            shape = layer.shape
            pos = cache.get(shape)
            if pos is None:
                pos = cache[shape] = layer.positions(pid)
            if layer.has(pos):
                return True
        return False

    def known_many(
        self, hashes: PidHashes, a: int, b: int, now: np.ndarray, skip_newest: bool = False
    ) -> np.ndarray:
        """:meth:`contains` for sightings ``a:b`` of ``hashes`` at times ``now`` (non-decreasing),
        against the layers as they are (``skip_newest``: all but the newest)."""
        known = np.zeros(b - a, dtype=bool)
        for layer in reversed(self.layers[:-1] if skip_newest else self.layers):
            deadline = layer.last_insert_ms + self.window_ms
            if now[0] > deadline:
                continue  # dead for all of them
            ask = np.flatnonzero(~known) if known.any() else None
            if ask is None:
                hit = hashes.has(layer, slice(a, b))
            else:
                hit = np.zeros(b - a, dtype=bool)
                hit[ask] = hashes.has(layer, a + ask)
            if now[-1] > deadline:
                hit &= now <= deadline
            known |= hit
        return known

    def contains(self, pid: int, now_ms: int) -> bool:
        """Is ``pid`` in any layer still alive at ``now_ms``?"""
        if pid in self._newest_cache and self.layers and self._alive(self.layers[-1], now_ms):
            return True
        return self._probe(pid, now_ms, skip_newest=False)

    def _roll(self, now_ms: int, capacity: int) -> TimestampedBloomFilter:
        """Start a new newest layer (the *builder*), after a cleanup."""
        self.cleanup(now_ms)
        newest = self.layers[-1] if self.layers else None
        base_rate = self.error_rate / (self.layer_count + 1)
        if newest is not None and newest.is_full and now_ms - newest.created_ms < self.span_ms:
            layer = TimestampedBloomFilter(
                min(MAX_LAYER_CAPACITY, newest.capacity * 2), max(newest.error_rate / 2, 1e-9), now_ms
            )
        else:
            layer = TimestampedBloomFilter(capacity, base_rate, now_ms)
        self.layers.append(layer)
        self._newest_cache = set()
        return layer

    def add(self, pid: int, now_ms: int, capacity: int) -> None:
        """Write ``pid`` to the newest layer, rolling a new one first if due.

        ``capacity`` is the base size for a time-rolled layer (see
        :func:`layer_capacity`); a layer rolled because it is full grows.
        """
        newest = self.writable(now_ms)
        if newest is None:
            newest = self._roll(now_ms, capacity)
        newest.put(newest.positions(pid), now_ms)
        self._newest_cache.add(pid)

    def touch_cached(self, pid: int, now_ms: int) -> bool:
        """The hot path of :meth:`refresh`: ``pid`` was already seen in the
        current newest layer and that layer is still writable, so the sighting
        only bumps the layer's ``last_insert_ms``. False means "ask refresh"."""
        if pid not in self._newest_cache:
            return False
        newest = self.layers[-1]
        if (
            now_ms - newest.created_ms >= self.span_ms
            or now_ms - newest.last_insert_ms > self.window_ms
            or newest.is_full
        ):
            return False
        if now_ms > newest.last_insert_ms:
            newest.last_insert_ms = now_ms
        return True

    def refresh(self, pid: int, now_ms: int, capacity: int) -> bool:
        """Record a sighting of ``pid``; return whether it was already known.

        Known in the current writable layer: that layer's ``last_insert_ms`` is
        bumped. Known only in an older (or no longer writable) layer: it is
        re-added to the newest. Unknown: nothing changes, the caller decides.
        """
        newest = self.writable(now_ms)
        if newest is not None:
            if pid in self._newest_cache:
                newest.touch(now_ms)
                return True
            pos = newest.positions(pid)
            if newest.has(pos):
                newest.put(pos, now_ms)
                self._newest_cache.add(pid)
                return True
            if not self._probe(pid, now_ms, skip_newest=True):
                return False
            newest.put(pos, now_ms)
            self._newest_cache.add(pid)
            return True
        if not self._probe(pid, now_ms, skip_newest=False):
            return False
        self.add(pid, now_ms, capacity)
        return True

    def cleanup(self, now_ms: int) -> int:
        """Drop every layer dead at ``now_ms``; return how many were dropped.

        Writes to a layer stop before the next one is created, so
        ``last_insert_ms`` never decreases from older to newer layers and the
        dead layers are always a prefix: the check is O(1) when none is dead.
        """
        dead = 0
        layers = self.layers
        while dead < len(layers) and now_ms - layers[dead].last_insert_ms > self.window_ms:
            dead += 1
        if dead:
            if dead == len(layers):
                self._newest_cache = set()
            del layers[:dead]
        return dead

    def expires_at_ms(self) -> int | None:
        """Event time after which every current layer is dead (None if empty)."""
        if not self.layers:
            return None
        return max(layer.last_insert_ms for layer in self.layers) + self.window_ms + 1

    # -- facts -----------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.layers)

    @property
    def size_bytes(self) -> int:
        return _HEADER.size + sum(1 + layer.size_bytes for layer in self.layers)

    def estimate_count(self) -> int:
        """Estimated distinct PIDs across layers (Swamidass-Baldi on the union).

        Layers of one shape are OR-ed and ``n ~= -(m/k) ln(1 - X/m)`` is taken
        from the X set bits of the union; shapes (quota changed) are summed.
        """
        by_shape: dict[tuple[int, int, int], object] = {}
        for layer in self.layers:
            bits = by_shape.get(layer.shape)
            by_shape[layer.shape] = layer.bits.copy() if bits is None else bits | layer.bits
        total = 0.0
        for (_, slices, per_slice), bits in by_shape.items():
            m = slices * per_slice
            ones = bits.count()
            if ones >= m:
                total += m
                continue
            total += -(m / slices) * math.log(1.0 - ones / m)
        return int(round(total))

    # -- serialization ------------------------------------------------------------
    def to_bytes(self) -> bytes:
        head = _HEADER.pack(
            MAGIC, VERSION, self.window_ms, self.layer_count, self.error_rate, len(self.layers)
        )
        return head + b"".join(bytes((layer.kind,)) + layer.to_bytes() for layer in self.layers)

    @classmethod
    def from_bytes(cls, blob: bytes | bytearray | memoryview) -> LayeredBloomFilter:
        """Load a filter, or raise :class:`CorruptStateError`; never half-loads."""
        buf = memoryview(blob)
        if len(buf) < _HEADER.size:
            raise CorruptStateError(f"Bloom state is {len(buf)} bytes, shorter than its header")
        magic, version, window_ms, layer_count, rate, n = _HEADER.unpack_from(buf, 0)
        if magic != MAGIC:
            raise CorruptStateError(f"Bloom state has magic {magic!r}, expected {MAGIC!r}")
        if version not in (1, VERSION):
            raise CorruptStateError(
                f"Bloom state has version {version}; this build reads versions 1 and {VERSION}"
            )
        try:
            result = cls(window_ms, layer_count, rate)
        except ValueError as exc:
            raise CorruptStateError(f"Bloom state header is invalid: {exc}") from None
        offset = _HEADER.size
        layers = []
        for _ in range(n):
            kind = LEGACY
            if version >= 2:
                if offset >= len(buf) or buf[offset] not in (LEGACY, MIX64):
                    raise CorruptStateError("Bloom layer's hash kind is missing or unknown")
                kind, offset = buf[offset], offset + 1
            layer, offset = TimestampedBloomFilter.from_buffer(buf, offset, kind)
            layers.append(layer)
        if offset != len(buf):
            raise CorruptStateError(f"Bloom state has {len(buf) - offset} trailing bytes")
        result.layers = layers
        return result
