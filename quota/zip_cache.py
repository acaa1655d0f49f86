"""Where the compiled judge's machine code is kept when pidquota runs from a zip.

numba keeps the machine code of a module inside a zip (``spark-submit --py-files
pidquota.zip``, or ``pidquota run --master``, which ships the same zip) in a folder named
after the zip's *path* (numba 0.68's ``ZipCacheLocator``). Spark copies the zip into a new
folder for every application and executor, so every executor of every application compiled
the kernel anew (16-41 CPU-s, in its first batch) and left ~2 MB in ``~/.cache/numba`` that
nothing removed: 37 such folders, 73 MB, on the machine that found it.

Here the folder is named after the zip's *content*:
``<numba's cache folder>/pidquota_zip_<the first 16 hex digits of the zip's SHA-256>_numba<version>_<Python's cache tag>``
(numba's cache folder: ``NUMBA_CACHE_DIR`` if set, else the user's, ``~/.cache/numba``).
``pidquota package`` and ``run --master`` write the same bytes for the same code (the zip's
entries carry a fixed date), so every copy of one build, in every application, shares one
folder: a machine's first executor compiles the kernel, every later one loads it (~0.3 s),
and a new build adds one folder. Keyed by the whole zip rather than the kernel's own file:
the kernel folds other modules' constants into its machine code (the hash's multiplier, the
layers' bounds), a change numba's per-file stamp would not see.

A numba without a cache for zips (before 0.68) keeps its own behaviour: each process compiles.
"""

from __future__ import annotations

import functools
import hashlib
import os


def zip_of(source: str) -> str | None:
    """The zip a module's file is read from (``/x/pidquota.zip/pidquota/quota/kernel.py``
    gives ``/x/pidquota.zip``), or None for a file on disk."""
    head = source
    while head and head != os.path.dirname(head):
        if head.endswith(".zip") and os.path.isfile(head):
            return head
        head = os.path.dirname(head)
    return None


@functools.lru_cache(maxsize=8)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    """The first 16 hex digits of the file's SHA-256 (memoized by its time and size)."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()[:16]


def folder_name(zip_path: str) -> str:
    """The cache folder's name for this zip: the same for every copy of the same bytes, and
    apart for each numba and Python (numba checks its index's version, not its data files')."""
    import sys

    from numba import __version__ as numba_version

    st = os.stat(zip_path)
    digest = _digest(zip_path, st.st_mtime_ns, st.st_size)
    return f"pidquota_zip_{digest}_numba{numba_version}_{sys.implementation.cache_tag}"


@functools.cache
def _cache_class():
    """numba's function cache with one locator, ours (None when this numba has no zip locator)."""
    try:
        from numba.core import caching, config
    except ImportError:
        return None
    if not hasattr(caching, "ZipCacheLocator") or not hasattr(caching, "CompileResultCacheImpl"):
        return None

    class ByContent(caching.ZipCacheLocator):
        """numba's zip locator, with the folder named by the zip's content (see the module)."""

        def __init__(self, py_func, py_file):
            super().__init__(py_func, py_file)
            base = config.CACHE_DIR or os.path.dirname(self._cache_path)
            self._cache_path = os.path.join(base, folder_name(zip_of(py_file)))

        @classmethod
        def from_function(cls, py_func, py_file):
            if zip_of(py_file) is None:
                return None
            self = cls(py_func, py_file)
            try:
                self.ensure_cache_path()
            except OSError:  # not writable: no cache, as numba does
                return None
            return self

    class Impl(caching.CompileResultCacheImpl):
        _locator_classes = [ByContent]

    class Cache(caching.FunctionCache):
        _impl_class = Impl

    return Cache


def by_content(dispatcher) -> bool:
    """Give a numba dispatcher of a function read from a zip the cache folder named by the
    zip's content. False for a file on disk, or a numba without a zip cache (numba's own cache
    stays); False too when the folder cannot be made or read (a read-only home on an executor):
    then no cache at all, so the kernel still compiles (numba's own zip cache would fail the
    compile there, on saving)."""
    cache = _cache_class()
    if cache is None or zip_of(dispatcher.py_func.__code__.co_filename) is None:
        return False
    try:
        dispatcher._cache = cache(dispatcher.py_func)  # numba's cache=True, with our folder
    except Exception:  # "no locator available", or the zip unreadable: compiled, not cached
        from numba.core.caching import NullCache

        dispatcher._cache = NullCache()
        return False
    return True
