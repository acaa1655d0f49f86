"""One layer of the KIP-936 caching layer: a Bloom filter with timestamps."""

from __future__ import annotations

import math
import struct

import bitarray
import numpy as np
from pybloom_live import BloomFilter

from pidquota.bloom.hashing import LEGACY, MIX64, Mix64
from pidquota.conf.errors import CorruptStateError

# created_ms, last_insert_ms, capacity, count, num_slices, bits_per_slice, error_rate
_HEADER = struct.Struct("<qqQQIQd")


class TimestampedBloomFilter:
    """A pybloom-live ``BloomFilter`` plus the event times KIP-936 needs.

    ``created_ms`` is when the layer was made; ``last_insert_ms`` is the latest
    event time at which a PID was written to (or refreshed in) the layer. The
    layered filter expires a layer once ``now_ms - last_insert_ms > window``.

    Sizing (pybloom-live's partitioned filter, n = capacity, p = error rate)::

        k (slices, one hash each) = ceil(log2(1 / p))
        bits per slice s          = ceil(n * ln(1/p) / (k * ln(2)^2))
        total bits m              = k * s   ~= 1.44 * n * log2(1/p)
        false-positive rate at n  ~= (1 - e^(-n/s))^k  ~= p

    Worked example, n = 100 PIDs, p = 0.01: k = ceil(6.64) = 7 slices,
    s = ceil(100 * 4.605 / (7 * 0.4805)) = ceil(136.9) = 137 bits, m = 959 bits
    (120 bytes): 9.6 bits per PID, against ~60-70 bytes per PID in a Python set.

    pybloom-live is the container and the sizing; the hash is ``kind``: new
    layers use :class:`~pidquota.bloom.hashing.Mix64`, which numpy computes
    for a batch of PIDs at once (:meth:`bits_of`, :meth:`set_positions`).
    Layers saved before it (``LEGACY``, pybloom-live's hashlib hash) are still
    read with their own hash, and never written again (bloom/layered.py), so
    they age out within a window. A PID's bit positions depend only on the
    kind and ``(num_slices, bits_per_slice)``, the layer's *shape*, so layers
    of one shape share one hash computation per PID (see :meth:`positions`).
    """

    __slots__ = ("created_ms", "last_insert_ms", "_bf", "kind")

    def __init__(self, capacity: int, error_rate: float, created_ms: int, kind: int = MIX64) -> None:
        if capacity < 1:
            raise ValueError(f"Bloom layer capacity must be >= 1, got {capacity}")
        if not 0.0 < error_rate < 1.0:
            raise ValueError(f"Bloom false-positive rate must be in (0, 1), got {error_rate}")
        self._bf = BloomFilter(capacity=capacity, error_rate=error_rate)
        self.created_ms = int(created_ms)
        self.last_insert_ms = int(created_ms)
        self.kind = kind

    # -- facts -----------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self._bf.capacity

    @property
    def error_rate(self) -> float:
        return self._bf.error_rate

    @property
    def count(self) -> int:
        """Distinct PIDs written (as pybloom-live counts them: new bit patterns)."""
        return self._bf.count

    @property
    def is_full(self) -> bool:
        return self._bf.count >= self._bf.capacity

    @property
    def shape(self) -> tuple[int, int, int]:
        """(hash kind, slices, bits per slice): layers of one shape share positions."""
        return (self.kind, self._bf.num_slices, self._bf.bits_per_slice)

    @property
    def num_bits(self) -> int:
        return self._bf.num_bits

    @property
    def size_bytes(self) -> int:
        """Bytes of the bit array plus the fixed header, as serialized."""
        return _HEADER.size + 8 + (self._bf.num_bits + 7) // 8

    @property
    def bits(self) -> bitarray.bitarray:
        return self._bf.bitarray

    # -- membership -------------------------------------------------------------
    def positions(self, pid: int) -> tuple[int, ...]:
        """Absolute bit indexes of ``pid`` in any layer of this layer's shape."""
        step = self._bf.bits_per_slice
        if self.kind == MIX64:
            return Mix64.one(pid, self._bf.num_slices, step)
        return tuple(i * step + h for i, h in enumerate(self._bf.make_hashes(pid)))

    def positions_many(self, pids: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        """Bit positions of many PIDs, one row each (``seeds``: :meth:`Mix64.seeds` of ``pids``)."""
        if self.kind == MIX64:
            return Mix64.many(seeds, self._bf.num_slices, self._bf.bits_per_slice)
        return np.array([self.positions(p) for p in pids.tolist()], dtype=np.int64).reshape(
            len(pids), self._bf.num_slices
        )

    def buffer(self) -> np.ndarray:
        """The bit array's bytes, as a writable numpy view (bits little-endian)."""
        return np.frombuffer(self._bf.bitarray, dtype=np.uint8)

    def bits_of(self, positions: np.ndarray) -> np.ndarray:
        """The bits at ``positions`` (any shape of int64 array), as booleans."""
        return self.bits_in(self.buffer(), positions)

    @staticmethod
    def bits_in(buf: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The bits of ``buf`` (a layer's bytes) at ``positions``, as booleans."""
        if len(buf) <= positions.size:  # unpacking costs less than shifting each
            return np.unpackbits(buf, bitorder="little").view(bool)[positions]
        return ((buf[positions >> 3] >> (positions & 7).astype(np.uint8)) & 1).astype(bool)

    def set_positions(self, positions: np.ndarray, pids_new: int, now_ms: int) -> None:
        """Set the bits at ``positions``; ``pids_new`` PIDs that were not in the layer."""
        self.set_bits(self.buffer(), positions)
        self._bf.count += pids_new
        self.touch(now_ms)

    @staticmethod
    def set_bits(buf: np.ndarray, positions: np.ndarray) -> None:
        """Set the bits of ``buf`` (a layer's bytes, or a copy) at ``positions``."""
        flat = positions.ravel()
        np.bitwise_or.at(buf, flat >> 3, np.left_shift(1, flat & 7).astype(np.uint8))

    def has(self, positions: tuple[int, ...]) -> bool:
        bits = self._bf.bitarray
        for p in positions:
            if not bits[p]:
                return False
        return True

    def put(self, positions: tuple[int, ...], now_ms: int) -> None:
        """Set ``positions``; count a new PID if any bit was unset."""
        bits = self._bf.bitarray
        new = False
        for p in positions:
            if not bits[p]:
                bits[p] = True
                new = True
        if new:
            self._bf.count += 1
        if now_ms > self.last_insert_ms:
            self.last_insert_ms = now_ms

    def touch(self, now_ms: int) -> None:
        if now_ms > self.last_insert_ms:
            self.last_insert_ms = now_ms

    def __contains__(self, pid: int) -> bool:
        return self.has(self.positions(pid))

    # -- serialization ------------------------------------------------------------
    def to_bytes(self) -> bytes:
        bf = self._bf
        payload = bf.bitarray.tobytes()
        head = _HEADER.pack(
            self.created_ms,
            self.last_insert_ms,
            bf.capacity,
            bf.count,
            bf.num_slices,
            bf.bits_per_slice,
            bf.error_rate,
        )
        return head + struct.pack("<Q", len(payload)) + payload

    @classmethod
    def from_buffer(
        cls, buf: memoryview, offset: int, kind: int = LEGACY
    ) -> tuple[TimestampedBloomFilter, int]:
        """Read one layer at ``offset``, written with hash ``kind``; return it and the offset after it."""
        end = offset + _HEADER.size + 8
        if end > len(buf):
            raise CorruptStateError("Bloom layer header is truncated")
        created, last, capacity, count, slices, per_slice, rate = _HEADER.unpack_from(buf, offset)
        (nbytes,) = struct.unpack_from("<Q", buf, offset + _HEADER.size)
        num_bits = slices * per_slice
        if not (0.0 < rate < 1.0) or capacity < 1 or slices < 1 or per_slice < 1:
            raise CorruptStateError(
                f"Bloom layer header is invalid (capacity={capacity}, slices={slices}, "
                f"bits_per_slice={per_slice}, error_rate={rate})"
            )
        expected_slices = math.ceil(math.log2(1.0 / rate))
        expected_per_slice = math.ceil(capacity * abs(math.log(rate)) / (expected_slices * math.log(2) ** 2))
        if (
            slices != expected_slices
            or per_slice != expected_per_slice
            or nbytes != (num_bits + 7) // 8
            or count > capacity + 1
        ):
            raise CorruptStateError(
                f"Bloom layer header does not match its sizing (slices={slices}, "
                f"bytes={nbytes}, count={count})"
            )
        if end + nbytes > len(buf):
            raise CorruptStateError("Bloom layer bit array is truncated")
        layer = cls.__new__(cls)
        bf = BloomFilter.__new__(BloomFilter)
        if kind == MIX64:  # pybloom-live's own hash functions are never asked: skip building them
            bf.error_rate, bf.num_slices, bf.bits_per_slice = rate, slices, per_slice
            bf.capacity, bf.num_bits, bf.count = capacity, num_bits, count
            bf.make_hashes = bf.hashfn = None  # pybloom-live's pickling deletes them; unpickling rebuilds
        else:
            bf._setup(rate, slices, per_slice, capacity, count)
        bits = bitarray.bitarray(endian="little")
        bits.frombytes(bytes(buf[end : end + nbytes]))
        del bits[num_bits:]
        bf.bitarray = bits
        layer._bf = bf
        layer.kind = kind
        layer.created_ms = created
        layer.last_insert_ms = last
        return layer, end + nbytes
