"""``pidquota formats``: the input formats pidquota reads, from the registry
(``pidquota.conf.formats``), each with what it reads, where from, and the client identity
it gives."""

from __future__ import annotations

import argparse

from pidquota.conf import formats as registry


def add_parser(sub) -> argparse.ArgumentParser:
    return sub.add_parser(
        "formats",
        help="the input formats (--input-format), what each reads and where from",
        description="List the input formats pidquota reads: the values of --input-format and pidquota.input.format.",
    )


def lines() -> list[str]:
    """One paragraph per format, the default first."""
    out = []
    for e in sorted(registry.FORMATS, key=lambda e: e.name != registry.DEFAULT):
        default = " (the default)" if e.name == registry.DEFAULT else ""
        inputs = " or ".join({"file": "files", "kafka": "Kafka topics"}.get(i, i) for i in e.inputs)
        follow = "; files followed as they grow" if e.follow else ""
        clients = ", ".join(e.clients) or "none"
        out += [
            f"{e.name}{default}",
            f"  {e.help}",
            f"  from {inputs}{follow}; client identity: {clients}",
            "",
        ]
    return out[:-1]


def run(args: argparse.Namespace) -> int:
    print("\n".join(lines()))
    return 0
