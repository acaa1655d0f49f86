"""The binary layout of a state value that maps principals to entries (``quota/states.py``,
``quota/wheel.py``), written and read in one place.

Layout: ``magic (3 bytes) + version (1 byte) + count (uint32)``, then per principal
``name length (uint32), name (UTF-8)`` and the entry, whose bytes the caller writes
and reads. Example: ``{"User:a": 7}`` with 8-byte entries under ``b"PQW"`` version 1 is
``b"PQW\\x01" + (1).to_bytes(4, "little") + (6).to_bytes(4, "little") + b"User:a"``
followed by the 8 bytes of 7: 26 bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from pidquota.conf.errors import CorruptStateError

_HEAD = struct.Struct("<3sBI")
_NAME = struct.Struct("<I")


def pack_named(
    magic: bytes, version: int, entries: dict, pack_entry: Callable[[object], list[bytes]]
) -> bytes:
    """``entries`` (name -> entry) as bytes; ``pack_entry`` gives the parts of one entry."""
    parts = [_HEAD.pack(magic, version, len(entries))]
    for principal, entry in entries.items():
        name = principal.encode("utf-8")
        parts += [_NAME.pack(len(name)), name, *pack_entry(entry)]
    return b"".join(parts)


def unpack_named(buf: bytes, magic: bytes, version: int, read_entry: Callable, what: str) -> dict:
    """The name -> entry dict written by :func:`pack_named`. ``read_entry(buf, at)`` returns
    one entry and the offset after it. Anything else is refused, naming ``what`` it was."""
    try:
        found, found_version, count = _HEAD.unpack_from(buf, 0)
        if found != magic or found_version != version:
            raise ValueError(f"header {bytes(buf[:4])!r}")
        entries, at = {}, _HEAD.size
        for _ in range(count):
            (n,) = _NAME.unpack_from(buf, at)
            name = bytes(buf[at + _NAME.size : at + _NAME.size + n]).decode("utf-8")
            entries[name], at = read_entry(buf, at + _NAME.size + n)
        if at != len(buf):
            raise ValueError(f"{len(buf) - at} bytes left over")
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise CorruptStateError(
            f"{what} in the checkpoint is not pidquota's ({exc}); it was written by another "
            "program or version. Start with a new checkpoint (--fresh)"
        ) from None
    return entries
