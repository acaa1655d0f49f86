"""One principal's batch judged sighting by sighting in compiled code (numba), as ``observe``.

:class:`pidquota.quota.enforcer.PrincipalQuota.observe` is the contract; this module runs
the very same steps over a sorted, deduplicated batch in a loop that numba compiles to
machine code, where the numpy judge (``quota/batch.py``) pays ~20 numpy calls per
principal and batch and the one-at-a-time path ~14 µs of Python per sighting
(benchmarks/operator.py). Without numba, or for state it does not cover, the caller keeps
its other paths (:func:`available`, :func:`covers`).
"""

from __future__ import annotations

import numpy as np

from pidquota.bloom.hashing import MIX64
from pidquota.quota.bucket import SLACK
from pidquota.quota.decision import Decisions

# The kernel stops where a write needs a new layer (the caller rolls it, in Python)
DONE, ROLL = 0, 1
# Integer credit is carried in a float64 only while every value of it is exact there
_EXACT = float(1 << 53)


def _mix(z):
    """SplitMix64's finalizer on a uint64 (bloom/hashing.py's ``Mix64._mix``)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _position(seed, s, per):
    """The absolute bit of slice ``s`` (of ``per`` bits) for a PID's ``seed`` (``Mix64.many``)."""
    x = _mix(seed + np.uint64(s + 1) * np.uint64(0x9E3779B97F4A7C15))
    return np.int64(s * per) + np.int64(((x >> np.uint64(32)) * np.uint64(per)) >> np.uint64(32))


def _kernel(  # noqa: PLR0913 - flat arrays are a compiled kernel's interface
    ts, pids, replayed, start, state, created, last, cap, count, slices, per, offs, bits, out_idx, out_now,
    out_wait, out_tok, out_adm, nout,
):  # fmt: skip
    """Judge sightings ``start:`` until the end or a write that needs a new layer.

    ``state`` (float64): now, credit, bucket last, rate, bucket window, filter window, span.
    Layers ``0..len(created)-1`` (oldest first) are all MIX64; ``bits`` holds their bytes
    at ``offs``; only the newest is written. Returns (index reached, DONE or ROLL, verdicts
    so far). On ROLL the sighting at the index is decided (if it asked the bucket) and its
    PID must be written to a new layer before the next one is judged.
    """
    golden = np.uint64(0x9E3779B97F4A7C15)
    now, credit, blast, rate, bwin, fwin, span = (
        state[0], state[1], state[2], state[3], state[4], state[5], state[6],
    )  # fmt: skip
    capacity = rate if rate > 1.0 else 1.0
    cap_credit = capacity * bwin
    nl = len(created)
    newest = nl - 1
    i = start
    while i < len(ts):
        t = float(ts[i])
        if t > now:
            now = t
        # the PID's seed: SplitMix64's mix of pid + phi (bloom/hashing.py, Mix64)
        seed = _mix(np.uint64(pids[i]) + golden)
        writable = (
            nl > 0
            and count[newest] < cap[newest]
            and now - created[newest] < span
            and now - last[newest] <= fwin
        )
        known = False
        for k in range(nl - 1, -1, -1):  # newest first: a refresh's usual answer
            if now - last[k] > fwin:
                continue  # dead: contains ignores it
            hit = True
            for s in range(slices[k]):
                p = _position(seed, s, per[k])
                if not (bits[offs[k] + (p >> 3)] >> (p & 7)) & 1:
                    hit = False
                    break
            if hit:
                known = True
                break
        write = known
        if not known:
            # the bucket: try_take at now (quota/bucket.py), credit in token-ms of the window
            c = credit
            if now > blast:
                c = credit + rate * (now - blast)
                if c >= cap_credit - SLACK * bwin:
                    c = cap_credit
            missing = bwin - c
            out_idx[nout] = i
            out_now[nout] = np.int64(now)
            if missing <= SLACK * bwin:
                credit = c - bwin if c - bwin > 0.0 else 0.0
                if now > blast:
                    blast = now
                out_adm[nout] = True
                out_wait[nout] = 0
                out_tok[nout] = credit / bwin
                write = True
            else:
                out_adm[nout] = False
                out_wait[nout] = np.int64(-(-missing // rate))
                out_tok[nout] = c / bwin
                write = i < replayed  # a replayed PID is remembered, throttled or not
            nout += 1
        if write:
            if not writable:
                state[0], state[1], state[2] = now, credit, blast
                return i, ROLL, nout
            new = False
            for s in range(slices[newest]):
                p = _position(seed, s, per[newest])
                byte = offs[newest] + (p >> 3)
                bit = np.uint8(1 << (p & 7))
                if not bits[byte] & bit:
                    bits[byte] |= bit
                    new = True
            if new:
                count[newest] += 1
            if now > last[newest]:
                last[newest] = now
        i += 1
    state[0], state[1], state[2] = now, credit, blast
    return i, DONE, nout


_compiled = None  # the kernel compiled, once per process (numba is imported only then)
_tried = False


def available() -> bool:
    """Whether the compiled kernel can run here: numba imports, and the kernel compiles.

    Its machine code is cached beside this file (``__pycache__``, numba's ``cache=True``):
    ~1 s to compile once per installation, ~0.3 s to load in each new process (a Spark
    Python worker, once). Where this file has no folder to cache in (pidquota shipped to a
    cluster as a zip, ``--py-files``), each process compiles it anew. It is compiled here,
    on empty arrays, so a numba that cannot compile it is found before any batch: then, as
    without numba, the numpy judge decides (the same verdicts, slower), said once as a
    warning, and the stream goes on."""
    global _compiled, _tried, _mix, _position
    if _tried:
        return _compiled is not None
    _tried = True
    try:
        from numba import njit
    except Exception as exc:  # not installed, or not loadable beside this numpy
        _slower(exc)
        return False
    try:
        try:
            _mix, _position = (njit(cache=True, inline="always")(f) for f in (_mix, _position))
            _compiled = njit(cache=True, nogil=True)(_kernel)
        except RuntimeError:  # "no locator available": a zip's file has no cache folder
            _mix, _position = (njit(inline="always")(getattr(f, "py_func", f)) for f in (_mix, _position))
            _compiled = njit(nogil=True)(_kernel)
        empty = np.zeros(0, dtype=np.int64)
        _run(empty, empty, 0, 0, np.zeros(7), _layer_arrays([]), _outputs(0), 0)
    except Exception as exc:  # numba's own faults: the numpy judge instead
        _compiled = None
        _slower(exc)
    return _compiled is not None


def _slower(exc: Exception) -> None:
    import warnings

    warnings.warn(
        f"pidquota: the compiled judge is not available ({type(exc).__name__}: {exc}); the numpy "
        "judge decides instead (the same verdicts, slower). Install numba to get it back.",
        RuntimeWarning,
        stacklevel=3,
    )


def _outputs(n: int) -> tuple:
    """The kernel's verdict arrays for ``n`` sightings: index, now, wait, tokens, admitted."""
    return (
        np.empty(n, dtype=np.int64),
        np.empty(n, dtype=np.int64),
        np.empty(n, dtype=np.int64),
        np.empty(n, dtype=np.float64),
        np.empty(n, dtype=np.bool_),
    )


def _run(ts, pids, replayed, start, state, arrays, outputs, nout):
    return _compiled(ts, pids, replayed, start, state, *arrays, *outputs, nout)


def covers(quota) -> bool:
    """Whether the kernel judges this state exactly: every layer of the current hash, and
    a credit that a float64 holds exactly (an integer credit under 2**53)."""
    b = quota.bucket
    if isinstance(b.credit, int) and b.capacity_credit >= _EXACT:
        return False
    return all(layer.kind == MIX64 for layer in quota.filter.layers)


def judge(quota, ts: np.ndarray, pids: np.ndarray, epochs: np.ndarray, replayed: int) -> Decisions:
    """:meth:`PrincipalQuota.observe` over sorted, deduplicated sightings (PIDs >= 0), in the
    kernel; the state moves as ``observe`` moves it. Requires :func:`available` and
    :func:`covers`."""
    n = len(ts)
    outputs = _outputs(n)
    out_idx, out_now, out_wait, out_tok, out_adm = outputs
    b, f = quota.bucket, quota.filter
    was_int = isinstance(b.credit, int)
    state = np.array(
        [quota.now_ms, b.credit, b.last_ms, b.rate, b.window_ms, f.window_ms, f.span_ms], dtype=np.float64
    )
    i, nout = 0, 0
    quota.cleanup_due(int(max(quota.now_ms, ts[0])) if n else quota.now_ms)
    while i < n:
        layers = f.layers
        arrays = _layer_arrays(layers)
        i, reason, nout = _run(ts, pids, replayed, i, state, arrays, outputs, nout)
        _write_back(layers, arrays)
        if reason == ROLL:
            now = int(state[0])
            f.add(int(pids[i]), now, quota._capacity)  # rolls a new layer (after a cleanup)
            i += 1
    quota.now_ms = int(state[0])
    credit = float(state[1])
    b.credit = int(credit) if was_int and credit.is_integer() else credit
    b.last_ms = int(state[2])
    quota.cleanup_due(quota.now_ms)
    idx = out_idx[:nout]
    admitted, wait = out_adm[:nout], out_wait[:nout]
    quota.stats.record_many(out_now[:nout], admitted, wait)
    took = int(admitted.sum())
    quota.admitted_total += took
    quota.throttled_total += nout - took
    return Decisions(pids[idx], epochs[idx], ts[idx], admitted, wait, out_tok[:nout])


def _layer_arrays(layers) -> tuple:
    """The layers as the kernel's flat arrays: times, sizes, shapes, and their bytes."""
    nl = len(layers)
    created = np.empty(nl, dtype=np.float64)
    last = np.empty(nl, dtype=np.float64)
    cap = np.empty(nl, dtype=np.int64)
    count = np.empty(nl, dtype=np.int64)
    slices = np.empty(nl, dtype=np.int64)
    per = np.empty(nl, dtype=np.int64)
    offs = np.zeros(nl, dtype=np.int64)
    at = 0
    for k, layer in enumerate(layers):
        bf = layer._bf
        created[k], last[k] = layer.created_ms, layer.last_insert_ms
        cap[k], count[k], slices[k], per[k] = bf.capacity, bf.count, bf.num_slices, bf.bits_per_slice
        offs[k] = at
        at += (bf.num_bits + 7) // 8
    bits = np.concatenate([layer.buffer() for layer in layers]) if nl else np.zeros(0, dtype=np.uint8)
    return created, last, cap, count, slices, per, offs, bits


def _write_back(layers, arrays) -> None:
    """The newest layer's bits, count and time, as the kernel left them (the others are read only)."""
    if not layers:
        return
    _, last, _, count, _, _, offs, bits = arrays
    newest = layers[-1]
    k = len(layers) - 1
    buf = newest.buffer()
    buf[:] = bits[offs[k] : offs[k] + len(buf)]
    newest._bf.count = int(count[k])
    newest.last_insert_ms = int(last[k])
