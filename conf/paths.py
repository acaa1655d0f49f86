"""Checkpoint locations: Spark takes a path or a URI; pidquota's own files beside them need a local path."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse


def local_path(uri: str) -> Path | None:
    """The local folder of a location (``/tmp/ck``, ``file:///tmp/ck``), or None for a
    remote one (``s3a://``, ``hdfs://``)."""
    if uri.startswith("file:"):
        return Path(unquote(urlparse(uri).path))
    if "://" in uri:
        return None
    return Path(uri)


def is_inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or below it, links resolved."""
    p, f = path.resolve(), folder.resolve()
    return p == f or f in p.parents
