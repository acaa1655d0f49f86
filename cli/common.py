"""Flags and loading shared by several commands: the settings (``--config``, ``--set``) and Redis
(``--redis``)."""

from __future__ import annotations

import argparse

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
    return load(args.config, {**parse_overrides(args.set), **overrides})


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
