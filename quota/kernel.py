"""One principal's batch judged sighting by sighting in compiled code (numba), as ``observe``.

:class:`pidquota.quota.enforcer.PrincipalQuota.observe` is the contract; this module runs
the very same steps over a sorted, deduplicated batch in a loop that numba compiles to
machine code, where the numpy judge (``quota/batch.py``) pays ~20 numpy calls per
principal and batch and the one-at-a-time path ~14 µs of Python per sighting
(benchmarks/operator.py). Without numba, or for state it does not cover, the caller keeps
its other paths (:func:`available`, :func:`covers`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from pidquota.bloom.hashing import MIX64
from pidquota.bloom.layered import MAX_BASE_CAPACITY, MAX_LAYER_CAPACITY, MIN_LAYER_CAPACITY
from pidquota.quota.bucket import SLACK
from pidquota.quota.decision import Decisions
from pidquota.quota.zip_cache import by_content

# The kernel stops where a write needs a new layer (the caller rolls it, in Python)
DONE, ROLL = 0, 1
# Integer credit is carried in a float64 only while every value of it is exact there
_EXACT = float(1 << 53)
# A saved state of more layers than this is read by the per-principal path (a state holds
# layer.count + 1 time layers and ~20 grown ones a span at most: a bound on crafted bytes'
# arrays and on the estimate's scan over shapes)
_MAX_LAYERS = 4096


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
    ts, pids, replayed, start, state, lo, nl, created, last, cap, count, slices, per, offs, bits, out_idx,
    out_now, out_wait, out_tok, out_adm, nout,
):  # fmt: skip
    """Judge sightings ``start:`` until the end or a write that needs a new layer.

    ``state`` (float64): now, credit, bucket last, rate, bucket window, filter window, span.
    Layers ``lo..nl-1`` of the arrays (oldest first) are all MIX64; ``bits`` holds their bytes
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
    newest = nl - 1
    i = start
    while i < len(ts):
        t = float(ts[i])
        if t > now:
            now = t
        # the PID's seed: SplitMix64's mix of pid + phi (bloom/hashing.py, Mix64)
        seed = _mix(np.uint64(pids[i]) + golden)
        writable = (
            nl > lo
            and count[newest] < cap[newest]
            and now - created[newest] < span
            and now - last[newest] <= fwin
        )
        known = False
        for k in range(nl - 1, lo - 1, -1):  # newest first: a refresh's usual answer
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
_grouped = None  # the group kernel (_group) compiled
_tried = False
# A process loads the compiled kernel (numba's import and the kernels' machine code: ~0.7 CPU-s)
# once it has been asked to judge this many sightings in all, not at its first one. The numpy
# judge decides the same verdicts ~2.5 us a sighting slower, so a process that judges fewer never
# pays the load, and one that judges more loses ~50 ms before it: a `pidquota run --once` over a
# few thousand events started two Spark Python workers that each loaded it for nothing, about a
# tenth of the run's CPU (docs/development.md). pidquota.compiled.after sets it in a run.
LOAD_AFTER = 20_000
_asked = 0


def wanted(n: int, count: bool = True) -> bool:
    """Whether ``n`` sightings are judged by the compiled kernel: once it is loaded, always;
    before, only once this process has been asked for :data:`LOAD_AFTER` sightings in all
    (counting these ``n``; ``count=False``: a caller whose sightings are counted where they are
    judged), and then it loads it (:func:`available`). Example: batches of 400 sightings are
    judged in numpy until the 50th, which loads the kernel and is judged by it, as is every
    batch after it. The operator sets :data:`LOAD_AFTER` from ``pidquota.compiled.after``."""
    global _asked
    if _tried:
        return _compiled is not None
    if count:
        _asked += n
    return _asked >= LOAD_AFTER and available()


def available() -> bool:
    """Whether the compiled kernel can run here: numba imports, and the kernel compiles.

    Its machine code is cached beside this file (``__pycache__``, numba's ``cache=True``):
    ~16 CPU-s to compile once per installation (the group pass is most of it), ~0.3 s to
    load in each new process (a Spark Python worker, once). From a zip (``pidquota package``,
    ``--py-files``, ``run --master``) it is cached in numba's user-wide folder
    (``~/.cache/numba``), one folder per zip's content (``quota/zip_cache.py``): a machine's
    first executor of a build compiles it, every later one loads it; a numba with no cache for
    zips (before 0.68) compiles it in each process. It is compiled here,
    on empty arrays, so a numba that cannot compile it is found before any batch: then, as
    without numba, the numpy judge decides (the same verdicts, slower), said once as a
    warning, and the stream goes on."""
    global _compiled, _tried, _grouped
    if _tried:
        return _compiled is not None
    _tried = True
    try:
        from numba import njit
    except Exception as exc:  # not installed, or not loadable beside this numpy
        _slower(exc)
        return False
    scope = globals()
    try:
        try:
            _jit(njit, scope, cache=True)
        except RuntimeError:  # "no locator available": a zip's file has no cache folder
            _jit(njit, scope, cache=False)
        _compiled, _grouped = scope["_kernel"], scope["_group"]
        empty = np.zeros(0, dtype=np.int64)
        _run(empty, empty, 0, 0, np.zeros(7), _layer_arrays([]), _outputs(0), 0)
        _grouped(empty, empty, empty, np.zeros(1, np.int64), np.zeros(0), np.zeros(0, np.bool_), np.zeros(0, np.uint8),
                 np.zeros(1, np.int64), 60_000, 4, 0.01, 10, 11, 0, 0)  # fmt: skip
    except Exception as exc:  # numba's own faults: the numpy judge instead
        _compiled = _grouped = None
        _slower(exc)
    return _compiled is not None


# The compiled functions: the helpers are inlined into their callers
_HELPERS = ("_mix", "_position")
_CALLED = ("_before", "_sort", "_sightings", "_get", "_put", "_f64", "_put_f64", "_sizing", "_cleanup", "_write_pid", "_size", "_purge",
           "_record", "_load", "_roll", "_save", "_estimate", "_judge_one", "_apply_rate", "_metrics",
           "_evict_at")  # fmt: skip


def _jit(njit, scope: dict, cache: bool) -> None:
    """Every compiled function, compiled in place of its Python one (callers find the
    compiled one among the module's globals when they are compiled, at their first call).
    From a zip, the cache folder is named by the zip's content (``quota/zip_cache.py``)."""
    options = [(_HELPERS, {"inline": "always"}), (_CALLED, {"no_cpython_wrapper": True})]
    for names, option in [*options, (("_kernel", "_group"), {"nogil": True})]:
        for name in names:
            scope[name] = njit(cache=cache, **option)(getattr(scope[name], "py_func", scope[name]))
            if cache:
                by_content(scope[name])


def compiled_here() -> bool:
    """Whether this installation already holds the kernels' machine code (numba's index files
    beside this module): a process then loads it (~0.3 s) instead of compiling it (~16 CPU-s)."""
    return any((Path(__file__).parent / "__pycache__").glob("kernel._group-*.nbi"))


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
    return _compiled(ts, pids, replayed, start, state, 0, len(arrays[0]), *arrays, *outputs, nout)


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


# -- a group of principals in one call (issue 55; the Python side is quota/group.py) ---------------
#
# The bytes of PrincipalQuota.to_bytes (quota/enforcer.py) and LayeredBloomFilter.to_bytes
# (bloom/layered.py) as offsets; tests/quota/test_group.py checks them against those structs.
HEAD = 68  # b"PQS", 2, rate, now, credit, bucket last, admitted, throttled, last cleanup, window
SAMPLE = 32  # start, admitted, throttled, the throttle times' sum
BLOOM_HEAD = 28  # b"LBF", 2, window, layer count, false-positive rate, layers
LAYER_HEAD = 1 + 52 + 8  # hash kind, (created, last, capacity, count, slices, bits per slice, rate), bytes
STATE_VERSION, BLOOM_VERSION = 2, 2
# What the group kernel says of each principal: judged, or left to the per-principal path
JUDGED, ELSEWHERE = 0, 1
# The metrics it returns per principal (quota/group.py names them)
F_RATE, F_TOKENS, F_THROTTLE, F_ESTIMATE = 0, 1, 2, 3
I_ADMITTED, I_THROTTLED, I_LAYERS, I_BYTES, I_TOOK, I_REFUSED, I_NOW, I_TIMER = range(8)


def _get(b, o, n):
    """The little-endian unsigned integer of ``n`` (4 or 8) bytes at ``b[o]``, as uint64."""
    if n == 8:
        return b[o : o + 8].view(np.uint64)[0]
    return np.uint64(b[o : o + 4].view(np.uint32)[0])


def _put(b, o, v, n):
    """``v``'s ``n`` (4 or 8) low bytes at ``b[o]``, little-endian."""
    if n == 8:
        b[o : o + 8].view(np.uint64)[0] = np.uint64(v)
    else:
        b[o : o + 4].view(np.uint32)[0] = np.uint32(v)


def _sizing(capacity, rate):
    """pybloom-live's ``BloomFilter`` shape for ``capacity`` PIDs at false-positive ``rate``:
    (slices, bits per slice), as bloom/layer.py documents it."""
    k = int(math.ceil(math.log(1.0 / rate) / math.log(2.0)))
    per = int(math.ceil((capacity * abs(math.log(rate))) / (k * (math.log(2.0) ** 2))))
    return k, per


def _cleanup(now, lo, nl, last, window):
    """The first layer alive at ``now`` (the dead ones are a prefix: LayeredBloomFilter.cleanup)."""
    while lo < nl and now - last[lo] > window:
        lo += 1
    return lo


def _purge(now, size, num, s0, s1, s2, s3, ns):
    """SampledStats.purge: the samples that ended ``num`` sizes before ``now`` dropped, and at
    most ``num`` kept (the newest). Returns how many are left, at the front."""
    horizon = now - num * size
    k = 0
    for j in range(ns):
        if s0[j] + size > horizon:
            s0[k], s1[k], s2[k], s3[k] = s0[j], s1[j], s2[j], s3[j]
            k += 1
    drop = k - num if k > num else 0
    for j in range(k - drop):
        s0[j], s1[j], s2[j], s3[j] = s0[j + drop], s1[j + drop], s2[j + drop], s3[j + drop]
    return k - drop


def _record(times, adm, wait, v0, v1, size, num, s0, s1, s2, s3, ns):
    """SampledStats.record_many over verdicts ``v0:v1`` (times non-decreasing)."""
    i = v0
    while i < v1:
        t = times[i]
        if ns == 0 or t >= s0[ns - 1] + size:
            s0[ns], s1[ns], s2[ns], s3[ns] = t, 0, 0, 0.0
            ns = _purge(t, size, num, s0, s1, s2, s3, ns + 1)
        end = s0[ns - 1] + size
        took, refused, waited = 0, 0, 0
        while i < v1 and times[i] < end:
            if adm[i]:
                took += 1
            else:
                refused += 1
                waited += wait[i]
            i += 1
        s1[ns - 1] += took
        s2[ns - 1] += refused
        s3[ns - 1] += float(waited)
    return ns


def _f64(b, o):
    """The little-endian float64 at ``b[o]``."""
    return b[o : o + 8].view(np.float64)[0]


def _put_f64(b, o, x):
    b[o : o + 8].view(np.float64)[0] = x


def _load(b, o, e, window, layer_count, error_rate, room):  # noqa: PLR0911, PLR0912, PLR0915
    """A saved state, ``b[o:e]``, read as ``PrincipalQuota.from_bytes`` reads it under the
    settings it was saved with, and the layers dead at its ``now`` dropped (``configure``).
    ``ok`` False: the per-principal path must read it (another version or hash, other
    settings, a credit past 2**53, or anything it would refuse as corrupt). ``room``: spare
    samples and layers for the batch. Returns ok, head (rate, now, credit, bucket last,
    admitted, throttled, last cleanup), the samples (4 arrays, their count), the layers
    (9 arrays, first live, count) and their bits (and the bytes used)."""
    head = np.zeros(7)
    n = e - o
    ns, nl, q = 0, 0, 0
    shaped = n >= HEAD + 4 and b[o] == 80 and b[o + 1] == 81 and b[o + 2] == 83 and b[o + 3] == STATE_VERSION
    if shaped:
        ns = np.int64(_get(b, o + HEAD, 4))
        q = HEAD + 4 + ns * SAMPLE
        shaped = ns <= n and q + 4 + BLOOM_HEAD <= n and q + 4 + np.int64(_get(b, o + q, 4)) == n
        q += 4
    if shaped:
        shaped = (
            b[o + q] == 76 and b[o + q + 1] == 66 and b[o + q + 2] == 70 and b[o + q + 3] == BLOOM_VERSION
        )
        nl = np.int64(_get(b, o + q + 24, 4)) if shaped else 0
        # each layer takes at least LAYER_HEAD + 1 bytes; more than _MAX_LAYERS: the other path
        shaped = shaped and nl <= min(_MAX_LAYERS, (n - q - BLOOM_HEAD) // (LAYER_HEAD + 1))
    if not shaped:
        ns, nl = 0, 0
    s0, s1, s2 = np.zeros(ns + room, np.int64), np.zeros(ns + room, np.int64), np.zeros(ns + room, np.int64)
    s3 = np.zeros(ns + room)
    created, last, err = np.zeros(nl + room), np.zeros(nl + room), np.zeros(nl + room)
    cap, count = np.zeros(nl + room, np.int64), np.zeros(nl + room, np.int64)
    slices, per = np.zeros(nl + room, np.int64), np.zeros(nl + room, np.int64)
    offs, nbytes = np.zeros(nl + room, np.int64), np.zeros(nl + room, np.int64)
    bits = np.zeros(n + 64, np.uint8)
    out = (head, s0, s1, s2, s3, created, last, err, cap, count, slices, per, offs, nbytes)
    if not shaped:
        return False, out, ns, 0, nl, bits, 0
    head[0] = _f64(b, o + 4)  # rate
    head[1] = float(np.int64(_get(b, o + 12, 8)))  # now
    head[2] = _f64(b, o + 20)  # credit
    head[3] = float(np.int64(_get(b, o + 28, 8)))  # bucket last
    head[4] = float(np.int64(_get(b, o + 36, 8)))  # admitted
    head[5] = float(np.int64(_get(b, o + 44, 8)))  # throttled
    head[6] = float(np.int64(_get(b, o + 52, 8)))  # last cleanup
    saved_window = np.int64(_get(b, o + 60, 8))
    rate, credit = head[0], head[2]
    if not (rate > 0 and credit >= 0 and head[4] >= 0 and head[5] >= 0 and saved_window == window):
        return False, out, ns, 0, nl, bits, 0
    for j in (1, 3, 4, 5, 6):  # times and counts a double holds exactly (the kernel keeps them so)
        if abs(head[j]) >= _EXACT:
            return False, out, ns, 0, nl, bits, 0
    head[2] = credit if credit != 0.0 else 0.0  # the contract reads an integral credit as an int: no -0.0
    if credit == math.floor(credit) and max(rate, 1.0) * window >= _EXACT:
        return False, out, ns, 0, nl, bits, 0  # an integer credit a double does not hold exactly
    for j in range(ns):
        at = o + HEAD + 4 + j * SAMPLE
        s0[j] = np.int64(_get(b, at, 8))
        s1[j] = np.int64(_get(b, at + 8, 8))
        s2[j] = np.int64(_get(b, at + 16, 8))
        s3[j] = _f64(b, at + 24)
        if abs(s0[j]) >= _EXACT or abs(s1[j]) >= _EXACT or abs(s2[j]) >= _EXACT:
            return False, out, ns, 0, nl, bits, 0
    if not (
        np.int64(_get(b, o + q + 4, 8)) == window
        and np.int64(_get(b, o + q + 12, 4)) == layer_count
        and _f64(b, o + q + 16) == error_rate
    ):
        return False, out, ns, 0, nl, bits, 0  # other settings: configure() decides
    at, used = o + q + BLOOM_HEAD, 0
    for k in range(nl):
        if at + LAYER_HEAD > e or b[at] != MIX64:
            return False, out, ns, 0, nl, bits, 0
        created[k] = float(np.int64(_get(b, at + 1, 8)))
        last[k] = float(np.int64(_get(b, at + 9, 8)))
        if abs(created[k]) >= _EXACT or abs(last[k]) >= _EXACT:
            return False, out, ns, 0, nl, bits, 0
        c_u, cnt_u = _get(b, at + 17, 8), _get(b, at + 25, 8)
        k_slices, k_per = np.int64(_get(b, at + 33, 4)), _get(b, at + 37, 8)
        r = _f64(b, at + 45)
        size_u = _get(b, at + 53, 8)
        if (
            not (0.0 < r < 1.0)
            or c_u < np.uint64(1)
            or c_u > np.uint64(1 << 40)
            or cnt_u > c_u + np.uint64(1)
        ):
            return False, out, ns, 0, nl, bits, 0
        if k_per > np.uint64(1 << 50) or size_u > np.uint64(1 << 50):
            return False, out, ns, 0, nl, bits, 0
        c, cnt, size = np.int64(c_u), np.int64(cnt_u), np.int64(size_u)
        want_slices = int(math.ceil(math.log2(1.0 / r)))
        want_per = int(math.ceil(float(c) * abs(math.log(r)) / (want_slices * math.log(2.0) ** 2)))
        if k_slices != want_slices or np.int64(k_per) != want_per:
            return False, out, ns, 0, nl, bits, 0
        num_bits = want_slices * want_per
        if size != (num_bits + 7) // 8 or at + LAYER_HEAD + size > e:
            return False, out, ns, 0, nl, bits, 0
        cap[k], count[k], slices[k], per[k], err[k] = c, cnt, want_slices, want_per, r
        offs[k], nbytes[k] = used, size
        at += LAYER_HEAD
        bits[used : used + nbytes[k]] = b[at : at + nbytes[k]]
        if num_bits % 8:  # bits past the layer's end are not kept (bitarray drops them)
            bits[used + nbytes[k] - 1] &= np.uint8((1 << (num_bits % 8)) - 1)
        used += nbytes[k]
        at += nbytes[k]
    if at != e:
        return False, out, ns, 0, nl, bits, 0
    lo = _cleanup(head[1], 0, nl, last, float(window))  # configure(now_ms=saved now)
    return True, out, ns, lo, nl, bits, used


def _roll(now, lo, nl, layers, bits, used, base_capacity, base_rate, window, span):
    """LayeredBloomFilter._roll: a cleanup at ``now``, then a new newest layer, twice the
    last one's size at half its rate if that one filled within its span, else a base one.
    Returns the first live layer, the layer count, the bits (grown if need be), bytes used."""
    created, last, err, cap, count, slices, per, offs, nbytes = layers
    lo = _cleanup(now, lo, nl, last, window)
    if nl > lo and count[nl - 1] >= cap[nl - 1] and now - created[nl - 1] < span:
        c, r = min(MAX_LAYER_CAPACITY, cap[nl - 1] * 2), max(err[nl - 1] / 2, 1e-9)
    else:
        c, r = base_capacity, base_rate
    k, p = _sizing(c, r)
    size = (k * p + 7) // 8
    if used + size > len(bits):
        grown = np.zeros(max(2 * len(bits), used + size), np.uint8)
        grown[:used] = bits[:used]
        bits = grown
    created[nl], last[nl], err[nl], cap[nl], count[nl] = now, now, r, c, 0
    slices[nl], per[nl], offs[nl], nbytes[nl] = k, p, used, size
    return lo, nl + 1, bits, used + size


def _write_pid(pid, now, k, layers, bits):
    """TimestampedBloomFilter.put of ``pid`` into layer ``k``."""
    created, last, err, cap, count, slices, per, offs, nbytes = layers
    seed = _mix(np.uint64(pid) + np.uint64(0x9E3779B97F4A7C15))
    new = False
    for s in range(slices[k]):
        p = _position(seed, s, per[k])
        byte = offs[k] + (p >> 3)
        bit = np.uint8(1 << (p & 7))
        if not bits[byte] & bit:
            bits[byte] |= bit
            new = True
    if new:
        count[k] += 1
    if now > last[k]:
        last[k] = now


def _size(ns, lo, nl, nbytes):
    """The state's size in bytes, as PrincipalQuota.to_bytes writes it."""
    total = HEAD + 4 + ns * SAMPLE + 4 + BLOOM_HEAD
    for k in range(lo, nl):
        total += LAYER_HEAD + nbytes[k]
    return total


def _save(pool, at, head, samples, ns, lo, nl, layers, bits, window, layer_count, error_rate):
    """PrincipalQuota.to_bytes into ``pool[at:]``; returns the offset after it."""
    s0, s1, s2, s3 = samples
    created, last, err, cap, count, slices, per, offs, nbytes = layers
    pool[at], pool[at + 1], pool[at + 2], pool[at + 3] = 80, 81, 83, STATE_VERSION
    _put_f64(pool, at + 4, head[0])
    _put(pool, at + 12, np.int64(head[1]), 8)
    _put_f64(pool, at + 20, head[2])
    for j in range(3, 7):
        _put(pool, at + 28 + 8 * (j - 3), np.int64(head[j]), 8)
    _put(pool, at + 60, window, 8)
    at += HEAD
    _put(pool, at, ns, 4)
    at += 4
    for j in range(ns):
        _put(pool, at, s0[j], 8)
        _put(pool, at + 8, s1[j], 8)
        _put(pool, at + 16, s2[j], 8)
        _put_f64(pool, at + 24, s3[j])
        at += SAMPLE
    bloom = BLOOM_HEAD
    for k in range(lo, nl):
        bloom += LAYER_HEAD + nbytes[k]
    _put(pool, at, bloom, 4)
    at += 4
    pool[at], pool[at + 1], pool[at + 2], pool[at + 3] = 76, 66, 70, BLOOM_VERSION
    _put(pool, at + 4, window, 8)
    _put(pool, at + 12, layer_count, 4)
    _put_f64(pool, at + 16, error_rate)
    _put(pool, at + 24, nl - lo, 4)
    at += BLOOM_HEAD
    for k in range(lo, nl):
        pool[at] = MIX64
        _put(pool, at + 1, np.int64(created[k]), 8)
        _put(pool, at + 9, np.int64(last[k]), 8)
        _put(pool, at + 17, cap[k], 8)
        _put(pool, at + 25, count[k], 8)
        _put(pool, at + 33, slices[k], 4)
        _put(pool, at + 37, per[k], 8)
        _put_f64(pool, at + 45, err[k])
        _put(pool, at + 53, nbytes[k], 8)
        at += LAYER_HEAD
        pool[at : at + nbytes[k]] = bits[offs[k] : offs[k] + nbytes[k]]
        at += nbytes[k]
    return at


def _estimate(lo, nl, layers, bits):
    """LayeredBloomFilter.estimate_count before its rounding: per shape (in the order the
    layers first show it) the OR of its layers, n = -(m/k) ln(1 - X/m) of its X set bits."""
    created, last, err, cap, count, slices, per, offs, nbytes = layers
    total = 0.0
    for k in range(lo, nl):
        first = True
        for j in range(lo, k):
            if slices[j] == slices[k] and per[j] == per[k]:
                first = False
                break
        if not first:
            continue
        union = bits[offs[k] : offs[k] + nbytes[k]].copy()
        for j in range(k + 1, nl):
            if slices[j] == slices[k] and per[j] == per[k]:
                union |= bits[offs[j] : offs[j] + nbytes[j]]
        ones = 0
        for x in union:
            v = x
            while v:
                v &= v - np.uint8(1)
                ones += 1
        m = slices[k] * per[k]
        if ones >= m:
            total += m
        else:
            total += -(m / slices[k]) * math.log(1.0 - ones / m)
    return total


def _judge_one(ts, pids, replayed, head, layers, lo, nl, bits, used, cfg, outputs, nout):
    """``PrincipalQuota.judge_batch`` (kernel path) over one principal's sorted, deduplicated
    sightings: a cleanup if due, the sightings with any rolls, a cleanup if due."""
    created, last, err, cap, count, slices, per, offs, nbytes = layers
    window, span, cleanup_ms, base_capacity, base_rate = cfg[0], cfg[1], cfg[2], cfg[3], cfg[4]
    out_idx, out_now, out_wait, out_tok, out_adm = outputs
    state = np.array([head[1], head[2], head[3], head[0], window, window, span])
    first = max(head[1], float(ts[0]))
    if first - head[6] >= cleanup_ms:
        lo = _cleanup(first, lo, nl, last, window)
        head[6] = first
    i = 0
    while i < len(ts):
        i, reason, nout = _kernel(
            ts, pids, replayed, i, state, lo, nl, created, last, cap, count, slices, per, offs, bits,
            out_idx, out_now, out_wait, out_tok, out_adm, nout,
        )  # fmt: skip
        if reason == ROLL:
            lo, nl, bits, used = _roll(
                state[0], lo, nl, layers, bits, used, base_capacity, base_rate, window, span
            )
            _write_pid(pids[i], state[0], nl - 1, layers, bits)
            i += 1
    head[1], head[2], head[3] = state[0], state[1], state[2]
    if head[1] - head[6] >= cleanup_ms:
        lo = _cleanup(head[1], lo, nl, last, window)
        head[6] = head[1]
    return lo, nl, bits, used, nout


def _apply_rate(head, rate, window):
    """PrincipalQuota.apply_rate: a changed rate refills the bucket at ``now`` under the old
    one, then keeps what was spent (TokenBucket.set_rate)."""
    if rate == head[0]:
        return
    old_cap = max(head[0], 1.0) * window
    now = head[1]
    if now > head[3]:
        c = head[2] + head[0] * (now - head[3])
        head[2] = old_cap if c >= old_cap - SLACK * window else c
        head[3] = now
    new_cap = max(rate, 1.0) * window
    head[2] = min(new_cap, max(0.0, new_cap - (old_cap - head[2])))
    head[0] = rate


def _metrics(head, samples, ns, lo, nl, layers, bits, window, num):
    """PrincipalQuota.metrics at the principal's ``now`` (after its bytes are written):
    rate, tokens, mean throttle time, the estimate before rounding; and the samples left."""
    s0, s1, s2, s3 = samples
    size = window  # a sample is a window long (SampledStats(window.num, window))
    now = np.int64(head[1])
    ns = _purge(now, size, num, s0, s1, s2, s3, ns)
    rate = 0.0
    if ns:
        took = 0
        for j in range(ns):
            took += s1[j]
        rate = (took * size) / max(now - s0[0], size)
    refused, waited = 0, 0.0
    for j in range(ns):
        refused += s2[j]
        waited += s3[j]
    throttle = waited / refused if refused else 0.0
    credit = head[2]
    if head[1] > head[3]:  # the bucket refilled at now
        cap = max(head[0], 1.0) * window
        c = credit + head[0] * (head[1] - head[3])
        credit = cap if c >= cap - SLACK * window else c
    return rate, credit / window, throttle, _estimate(lo, nl, layers, bits), ns


def _evict_at(head, lo, nl, layers, window):
    """PrincipalQuota.evict_at_ms: when every layer is dead and the bucket full again."""
    last = layers[1]
    expiry = np.int64(head[1])
    if nl > lo:
        newest = last[lo]
        for k in range(lo, nl):
            newest = max(newest, last[k])
        expiry = np.int64(newest) + np.int64(window) + 1
        if expiry == 0:
            expiry = np.int64(head[1])
    missing = max(head[0], 1.0) * window - head[2]
    full = np.int64(head[3]) if missing <= 0 else np.int64(head[3]) + np.int64(-(-missing // head[0]))
    return max(expiry, full, np.int64(head[1]))


def _before(i, j, ts, pids, epochs):
    """Whether sighting ``i`` comes before ``j``: by time, PID, epoch (judge_batch's order)."""
    if ts[i] != ts[j]:
        return ts[i] < ts[j]
    if pids[i] != pids[j]:
        return pids[i] < pids[j]
    return epochs[i] < epochs[j]


def _sort(idx, spare, n, ts, pids, epochs):
    """``idx[:n]`` (rows of ``ts``, ``pids``, ``epochs``) in :func:`_before`'s order: a stable
    bottom-up merge sort, O(n log n) whatever the input; one pass when already in order."""
    ordered = True
    for k in range(1, n):
        if _before(idx[k], idx[k - 1], ts, pids, epochs):
            ordered = False
            break
    if ordered:
        return idx
    src, dst = idx, spare
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if _before(src[j], src[i], ts, pids, epochs):
                    dst[k] = src[j]
                    j += 1
                else:
                    dst[k] = src[i]
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < hi:
                dst[k] = src[j]
                j += 1
                k += 1
        src, dst = dst, src
        width *= 2
    return src


def _sightings(a, b, ts, pids, epochs, idx, spare, seg_ts, seg_pids, seg_src):
    """Rows ``a:b`` as judge_batch takes them: PIDs < 0 dropped, sorted, repeats of (time,
    PID) folded into the first. Returns how many are left (in ``seg_*``, ``seg_src`` their
    rows), the rows' least time (the ignored ones' too) and how many were ignored."""
    m, ignored, least = 0, 0, ts[a] if b > a else 0
    for r in range(a, b):
        least = min(least, ts[r])
        if pids[r] < 0:
            ignored += 1
        else:
            idx[m] = r
            m += 1
    order = _sort(idx, spare, m, ts, pids, epochs)
    q = 0
    for k in range(m):
        r = order[k]
        if q > 0 and ts[r] == seg_ts[q - 1] and pids[r] == seg_pids[q - 1]:
            continue
        seg_ts[q], seg_pids[q], seg_src[q] = ts[r], pids[r], r
        q += 1
    return q, least, ignored


def _group(  # noqa: PLR0913
    ts, pids, epochs, bounds, rates, fresh, blobs, boffs, window, layer_count, error_rate, cleanup_ms, window_num,
    watermark, replay_until,
):  # fmt: skip
    """Principals ``p`` of a group, each with its sightings ``bounds[p]:bounds[p+1]`` of ``ts``/
    ``pids``/``epochs`` (any order, PIDs < 0 among them), its rate, and its saved state
    ``blobs[boffs[p]:boffs[p+1]]`` (``fresh[p]``: none, a new principal from its least time),
    judged one after the other as the per-principal path judges them (quota/group.py).
    The verdicts' ``out_idx`` are rows of the input."""
    P = len(rates)
    n = len(ts)
    status = np.zeros(P, np.int8)
    fmet = np.zeros((P, 4))
    imet = np.zeros((P, 8), np.int64)
    vb = np.zeros(P + 1, np.int64)
    out_idx, out_now, out_wait = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    out_tok, out_adm = np.empty(n), np.empty(n, np.bool_)
    outputs = (out_idx, out_now, out_wait, out_tok, out_adm)
    longest = 0
    for p in range(P):
        longest = max(longest, bounds[p + 1] - bounds[p])
    idx, spare, seg_src = (
        np.empty(longest, np.int64),
        np.empty(longest, np.int64),
        np.empty(longest, np.int64),
    )
    seg_ts, seg_pids = np.empty(longest, np.int64), np.empty(longest, np.int64)
    pool = np.empty(len(blobs) + 1024 * P + 1024, np.uint8)
    poffs = np.zeros(P + 1, np.int64)
    span = max(1, window // layer_count)
    base_rate = error_rate / (layer_count + 1)
    at, nout = 0, 0
    for p in range(P):
        o, e = boffs[p], boffs[p + 1]
        rate = rates[p]
        vb[p] = nout
        poffs[p] = at
        q, least, _ = _sightings(  # the ignored ones: the caller counts them for every principal
            bounds[p], bounds[p + 1], ts, pids, epochs, idx, spare, seg_ts, seg_pids, seg_src
        )
        a, b = 0, q
        ok, arrs, ns, lo, nl, bits, used = _load(blobs, o, e, window, layer_count, error_rate, b - a + 2)
        head, s0, s1, s2, s3 = arrs[0], arrs[1], arrs[2], arrs[3], arrs[4]
        layers = (arrs[5], arrs[6], arrs[7], arrs[8], arrs[9], arrs[10], arrs[11], arrs[12], arrs[13])
        samples = (s0, s1, s2, s3)
        if fresh[p]:  # a new principal: PrincipalQuota(rate, settings, min of its timestamps)
            t = float(least)
            head[0], head[1], head[2], head[3], head[6] = rate, t, max(rate, 1.0) * window, t, t
            ok = True
        if not ok or max(rate, 1.0) * window >= _EXACT:
            status[p] = ELSEWHERE
            poffs[p + 1] = at
            continue
        _apply_rate(head, rate, float(window))
        if b > a:
            mine_ts, mine_pids = seg_ts[a:b], seg_pids[a:b]
            replayed = np.searchsorted(mine_ts, replay_until)
            cfg = np.array([float(window), float(span), float(cleanup_ms),
                            float(min(MAX_BASE_CAPACITY, max(MIN_LAYER_CAPACITY, math.ceil(rate)))), base_rate])  # fmt: skip
            v0 = nout
            lo, nl, bits, used, nout = _judge_one(
                mine_ts, mine_pids, replayed, head, layers, lo, nl, bits, used, cfg, outputs, nout
            )
            ns = _record(out_now, out_adm, out_wait, v0, nout, window, window_num, s0, s1, s2, s3, ns)
            for v in range(v0, nout):
                out_idx[v] = seg_src[out_idx[v]]  # a row of the input
                if out_adm[v]:
                    head[4] += 1
                else:
                    head[5] += 1
                if ts[out_idx[v]] >= replay_until:
                    imet[p, I_TOOK if out_adm[v] else I_REFUSED] += 1
        need = _size(ns, lo, nl, layers[8])
        if at + need > len(pool):
            grown = np.empty(max(2 * len(pool), at + need), np.uint8)
            grown[:at] = pool[:at]
            pool = grown
        at = _save(pool, at, head, samples, ns, lo, nl, layers, bits, window, layer_count, error_rate)
        poffs[p + 1] = at
        imet[p, I_TIMER] = max(_evict_at(head, lo, nl, layers, float(window)), watermark + 1)
        rate_now, tokens, throttle, estimate, ns = _metrics(
            head, samples, ns, lo, nl, layers, bits, window, window_num
        )
        fmet[p, F_RATE], fmet[p, F_TOKENS], fmet[p, F_THROTTLE], fmet[p, F_ESTIMATE] = (
            rate_now, tokens, throttle, estimate,
        )  # fmt: skip
        imet[p, I_ADMITTED], imet[p, I_THROTTLED] = np.int64(head[4]), np.int64(head[5])
        imet[p, I_LAYERS], imet[p, I_NOW] = nl - lo, np.int64(head[1])
        imet[p, I_BYTES] = _size(ns, lo, nl, layers[8])
    vb[P] = nout
    return status, pool[:at], poffs, fmet, imet, vb, outputs
