"""The Bloom layers' PID hash: a 64-bit mix and double hashing, in bulk and one at a time."""

from __future__ import annotations

import numpy as np

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
# kind of hash a layer was written with (stored per layer, bloom/layered.py)
LEGACY = 0  # pybloom-live's own: hashlib per PID (layers written before version 2)
MIX64 = 1  # this module's


class Mix64:
    """Bit positions of PIDs in a partitioned Bloom filter of ``k`` slices of ``s`` bits.

    One 64-bit mix (SplitMix64's finalizer, a bijection on 64-bit words)
    gives ``h1 = mix(pid)`` and ``h2 = mix(h1) | 1``. Slice ``i`` takes
    ``x_i = h1 + i * h2 (mod 2^64)`` and maps its top 32 bits onto the slice,
    ``pos_i = ((x_i >> 32) * s) >> 32`` (a multiply-shift in place of ``% s``),
    at absolute bit ``i * s + pos_i``. Two hashes per PID serve every shape
    (Kirsch and Mitzenmacher: double hashing keeps the false-positive rate of
    k independent hashes), and numpy computes them for a whole batch at once,
    where pybloom-live calls ``hashlib`` once per PID per probe.

    Worked example, PID 7, k = 7, s = 137 (100 PIDs at 1%): ``h1 = mix(7)``,
    ``h2 = mix(h1) | 1``; slice 0 sets bit ``(h1 >> 32) * 137 >> 32``, a
    number in 0..136; slice 6 sets bit ``6 * 137 + ((h1 + 6 h2) >> 32) * 137 >> 32``.
    :meth:`one` gives the same positions as :meth:`many` for the same PID.
    """

    @staticmethod
    def _mix_np(x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            z = x + np.uint64(_GOLDEN)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
        return z ^ (z >> np.uint64(31))

    @classmethod
    def pair(cls, pids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(h1, h2)`` of each PID (uint64 arrays); computed once per batch."""
        h1 = cls._mix_np(np.asarray(pids, dtype=np.int64).view(np.uint64))
        return h1, cls._mix_np(h1) | np.uint64(1)

    @staticmethod
    def many(h1: np.ndarray, h2: np.ndarray, slices: int, per_slice: int) -> np.ndarray:
        """Absolute bit positions, one row of ``slices`` per PID (int64)."""
        i = np.arange(slices, dtype=np.uint64)
        with np.errstate(over="ignore"):
            x = h1[:, None] + i[None, :] * h2[:, None]
        x >>= np.uint64(32)
        x *= np.uint64(per_slice)
        x >>= np.uint64(32)
        x += i * np.uint64(per_slice)
        return x.view(np.int64)

    @staticmethod
    def member(buf: np.ndarray, h1: np.ndarray, h2: np.ndarray, slices: int, per_slice: int) -> np.ndarray:
        """Are all bits of each PID set in ``buf`` (a layer's bytes, little-endian bits)?

        Slice by slice, and only for the PIDs whose bits were all set so far:
        in a layer filled to a fraction f of its bits, a PID that is not in it
        costs about 1 / (1 - f) bit tests instead of ``slices``."""
        n = len(h1)
        bits = np.unpackbits(buf, bitorder="little") if len(buf) <= n * slices else None
        idx = np.arange(n)
        a1, a2 = h1, h2
        for i in range(slices):
            with np.errstate(over="ignore"):
                x = a1 + np.uint64(i) * a2
            x >>= np.uint64(32)
            x *= np.uint64(per_slice)
            x >>= np.uint64(32)
            p = x.view(np.int64) + i * per_slice
            hit = bits[p] if bits is not None else (buf[p >> 3] >> (p & 7).astype(np.uint8)) & 1
            idx = idx[hit.view(bool)]
            if not len(idx):
                break
            a1, a2 = h1[idx], h2[idx]
        out = np.zeros(n, dtype=bool)
        out[idx] = True
        return out

    @staticmethod
    def _mix(x: int) -> int:
        z = (x + _GOLDEN) & _MASK
        z = ((z ^ (z >> 30)) * _M1) & _MASK
        z = ((z ^ (z >> 27)) * _M2) & _MASK
        return z ^ (z >> 31)

    @classmethod
    def one(cls, pid: int, slices: int, per_slice: int) -> tuple[int, ...]:
        """The positions of one PID, as :meth:`many` gives them."""
        h1 = cls._mix(pid & _MASK)
        h2 = cls._mix(h1) | 1
        return tuple(
            i * per_slice + ((((h1 + i * h2) & _MASK) >> 32) * per_slice >> 32) for i in range(slices)
        )
