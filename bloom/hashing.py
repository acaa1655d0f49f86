"""The Bloom layers' PID hash: a 64-bit mix per slice, in bulk (numpy) and one at a time."""

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

    A PID's seed is ``h = mix(pid + phi)``, SplitMix64's finalizer ``mix`` (a
    bijection on 64-bit words) and its constant ``phi = 0x9E3779B97F4A7C15``.
    Slice ``i`` takes the next output of a SplitMix64 generator from that
    seed, ``x_i = mix(h + (i + 1) phi)``, and maps its top 32 bits onto the
    slice, ``pos_i = ((x_i >> 32) * s) >> 32`` (a multiply-shift in place of
    ``% s``), at absolute bit ``i * s + pos_i``. numpy computes this for a
    whole batch at once, where pybloom-live calls ``hashlib`` per PID.

    Each slice has its own mix, not double hashing (``h1 + i h2``): measured
    at 65 of 100 PIDs in a layer of 9 slices of 144 bits, double hashing let
    through 3.3e-4 of strangers against 1.1e-4 in theory, because two slices
    that collide make every slice collide; one mix per slice gives 0.97e-4
    (``tests/bloom/test_hashing.py`` checks the rate at capacity).

    Worked example, PID 7, k = 7, s = 137 (100 PIDs at 1%): ``h = mix(7 + phi)``;
    slice 0 sets bit ``(mix(h + phi) >> 32) * 137 >> 32``, a number in 0..136;
    slice 6 sets bit ``6 * 137 + (mix(h + 7 phi) >> 32) * 137 >> 32``.
    :meth:`one` gives the same positions as :meth:`many` for the same PID.
    """

    @staticmethod
    def _mix_np(z: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
        return z ^ (z >> np.uint64(31))

    @classmethod
    def seeds(cls, pids: np.ndarray) -> np.ndarray:
        """Each PID's seed ``h`` (uint64); computed once per batch."""
        with np.errstate(over="ignore"):
            return cls._mix_np(np.asarray(pids, dtype=np.int64).view(np.uint64) + np.uint64(_GOLDEN))

    @classmethod
    def _slice(cls, seeds: np.ndarray, i, per_slice: int) -> np.ndarray:
        """Positions within slice ``i`` (an int, or a row of them against a column of seeds)."""
        with np.errstate(over="ignore"):
            x = cls._mix_np(seeds + (np.asarray(i, dtype=np.uint64) + np.uint64(1)) * np.uint64(_GOLDEN))
        x >>= np.uint64(32)
        x *= np.uint64(per_slice)
        x >>= np.uint64(32)
        return x

    @classmethod
    def many(cls, seeds: np.ndarray, slices: int, per_slice: int) -> np.ndarray:
        """Absolute bit positions, one row of ``slices`` per PID (int64)."""
        i = np.arange(slices, dtype=np.uint64)
        x = cls._slice(seeds[:, None], i[None, :], per_slice)
        x += i * np.uint64(per_slice)
        return x.view(np.int64)

    @classmethod
    def member(cls, buf: np.ndarray, seeds: np.ndarray, slices: int, per_slice: int) -> np.ndarray:
        """Are all bits of each PID set in ``buf`` (a layer's bytes, little-endian bits)?

        Slice by slice, and only for the PIDs whose bits were all set so far:
        in a layer filled to a fraction f of its bits, a PID that is not in it
        costs about 1 / (1 - f) bit tests instead of ``slices``."""
        n = len(seeds)
        bits = np.unpackbits(buf, bitorder="little") if len(buf) <= n * slices else None
        idx = np.arange(n)
        alive = seeds
        for i in range(slices):
            p = cls._slice(alive, i, per_slice).view(np.int64) + i * per_slice
            hit = bits[p] if bits is not None else (buf[p >> 3] >> (p & 7).astype(np.uint8)) & 1
            idx = idx[hit.view(bool)]
            if not len(idx):
                break
            alive = seeds[idx]
        out = np.zeros(n, dtype=bool)
        out[idx] = True
        return out

    @staticmethod
    def _mix(z: int) -> int:
        z = ((z ^ (z >> 30)) * _M1) & _MASK
        z = ((z ^ (z >> 27)) * _M2) & _MASK
        return z ^ (z >> 31)

    @classmethod
    def one(cls, pid: int, slices: int, per_slice: int) -> tuple[int, ...]:
        """The positions of one PID, as :meth:`many` gives them."""
        # The mix inlined and each slice's seed stepped by phi (mod 2**64), no call per slice:
        # every PID of a batch judged one at a time (a steady principal's, quota/enforcer.py)
        # is hashed here
        x = cls._mix((pid + _GOLDEN) & _MASK)
        out, at = [], 0
        for _ in range(slices):
            x = (x + _GOLDEN) & _MASK  # h + (i + 1) phi
            z = ((x ^ (x >> 30)) * _M1) & _MASK
            z = ((z ^ (z >> 27)) * _M2) & _MASK
            out.append(at + (((z ^ (z >> 31)) >> 32) * per_slice >> 32))
            at += per_slice
        return tuple(out)
