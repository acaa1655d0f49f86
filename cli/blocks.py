"""``pidquota blocks``: the KIP-730 PID block allocation history, and the block store that
``pidquota generate`` shares."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pidquota.cli.common import add_config_flags, load_settings
from pidquota.traffic.blocks import BlockStore, FileBlockStore, RedisBlockStore

OLD_BLOCKS = "pidquota-blocks.json"  # the default before 2026-11-27: in the working folder


def default_blocks() -> str:
    """The block store's file: the user's state folder (``$XDG_STATE_HOME``, else
    ``~/.local/state``), so PIDs never repeat across runs of ``generate`` from any folder,
    and none of them leaves a file in the folder it ran in. A store an earlier pidquota left
    in the working folder is still used, so its PIDs are not handed out again."""
    if Path(OLD_BLOCKS).is_file():
        return OLD_BLOCKS
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return str(Path(state) / "pidquota" / "pid-blocks.json")


def block_store(args: argparse.Namespace) -> BlockStore:
    if args.redis:
        from pidquota.store.client import connect_config
        from pidquota.store.keys import Keys

        config = load_settings(args)
        client = connect_config(config, args.redis)
        return RedisBlockStore(client, Keys(config["pidquota.redis.prefix"]).pid_blocks)
    return FileBlockStore(args.blocks)


def add_block_store_flags(p) -> None:
    """Where the KIP-730 blocks are kept: a file, or Redis; and the settings flags."""
    p.add_argument(
        "--blocks", default=default_blocks(), metavar="FILE", help="block store file (%(default)s)"
    )
    p.add_argument(
        "--redis", metavar="URL", help="keep blocks in Redis instead, e.g. redis://localhost:6379/0"
    )
    add_config_flags(p)


def add_parser(sub) -> argparse.ArgumentParser:
    blocks = sub.add_parser("blocks", help="print the KIP-730 PID block allocation history")
    add_block_store_flags(blocks)
    return blocks


def run(args: argparse.Namespace) -> int:
    history = block_store(args).history()
    print(f"{'#':>5} {'broker_id':>9} {'broker_epoch':>12} {'start':>12} {'block_end':>12}")
    for i, b in enumerate(history):
        print(f"{i:>5} {b.broker_id:>9} {b.broker_epoch:>12} {b.start:>12} {b.block_end:>12}")
    print(f"{len(history)} blocks, {sum(b.length for b in history):,} producer IDs")
    return 0
