"""Flags and loading shared by several commands: the settings (``--config``, ``--set``) and Redis
(``--redis``)."""

from __future__ import annotations

import argparse

from pidquota.conf import formats as registry
from pidquota.conf.errors import ConfigError
from pidquota.conf.loader import Config, load, parse_overrides
from pidquota.store.client import connect_config


def add_config_flags(p) -> None:
    """``--config FILE`` and ``--set KEY=VALUE``: every command reads the same settings the same way."""
    p.add_argument("--config", metavar="FILE", help=".properties file (default: conf/pidquota.properties)")
    p.add_argument(
        "--set", metavar="KEY=VALUE", action="append", default=[], help="override a setting (repeatable)"
    )


def load_settings(args: argparse.Namespace, **overrides: str) -> Config:
    """The validated settings of ``--config`` and ``--set`` (plus ``overrides``, which win), over
    ``PIDQUOTA_*`` and the defaults: Redis AUTH, TLS and prefix, and the Kafka security settings,
    apply to every command as they do to the enforcer."""
    return load(args.config, {**parse_overrides(args.set), **input_overrides(args), **overrides})


def add_input_flags(p, follow: bool = False) -> None:
    """``--input-format`` (and ``--follow``/``--no-follow`` for a long-running input)."""
    p.add_argument(
        "--input-format",
        choices=registry.names(),
        help=f"what the input is: {registry.described().replace('`', '')} "
        f"(default: pidquota.input.format, {registry.DEFAULT})",
    )
    if follow:
        p.add_argument(
            "--follow",
            action=argparse.BooleanOptionalAction,
            help="read the new lines of growing files, as tail -F does (default: on for "
            + ", ".join(e.name for e in registry.FORMATS if e.follow)
            + ")",
        )


def input_overrides(args: argparse.Namespace) -> dict[str, str]:
    """The settings ``--input-format`` and ``--follow`` stand for, when given."""
    out = {}
    if getattr(args, "input_format", None):
        out["pidquota.input.format"] = args.input_format
    if getattr(args, "follow", None) is not None:
        out["pidquota.input.follow"] = "true" if args.follow else "false"
    return out


def add_redis_flags(p) -> None:
    """``--redis URL`` and the settings flags, for the commands that talk to Redis."""
    p.add_argument(
        "--redis", metavar="URL", help="redis://HOST:PORT/DB or rediss:// (default: pidquota.redis.url)"
    )
    add_config_flags(p)


def redis_from(args: argparse.Namespace) -> tuple[object, Config]:
    """The Redis client and settings of ``--redis`` (or ``pidquota.redis.url``); none given is an error."""
    config = load_settings(args, **({"pidquota.redis.url": args.redis} if args.redis else {}))
    url = config["pidquota.redis.url"]
    if not url:
        raise ConfigError("no Redis given: pass --redis redis://HOST:PORT/DB or set pidquota.redis.url")
    return connect_config(config), config
