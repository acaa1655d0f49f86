"""``pidquota configs``: set or show producer_ids_rate quotas in Redis, as kafka-configs.sh does
for ``/config/users/<user>`` and ``/config/users/<default>``."""

from __future__ import annotations

import argparse

from pidquota.cli.common import add_redis_flags, redis_from
from pidquota.conf.errors import ConfigError
from pidquota.quota.resolver import DEFAULT_ENTITY, QUOTA_KEY, user_entity
from pidquota.store.quotas import RedisQuotaStore


def add_parser(sub) -> argparse.ArgumentParser:
    cfg = sub.add_parser(
        "configs",
        help="set or show producer_ids_rate quotas in Redis, like kafka-configs.sh",
        description="Alter or describe user quotas kept in Redis, the way kafka-configs.sh does for "
        "/config/users/<user> and /config/users/<default>.",
    )
    add_redis_flags(cfg)
    action = cfg.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="change configs")
    action.add_argument("--describe", action="store_true", help="show configs")
    cfg.add_argument("--entity-type", required=True, help="only 'users' is supported")
    who = cfg.add_mutually_exclusive_group()
    who.add_argument(
        "--entity-name", help="the user, as kafka-configs.sh takes it (alice) or as a principal (User:alice)"
    )
    who.add_argument("--entity-default", action="store_true", help="the <default> user entity")
    cfg.add_argument("--add-config", metavar="K=V[,K=V]", help=f"configs to set, e.g. '{QUOTA_KEY}=50'")
    cfg.add_argument("--delete-config", metavar="K[,K]", help=f"configs to remove, e.g. {QUOTA_KEY}")
    return cfg


def _who(entity: str) -> str:
    return "the default user-principal" if entity == DEFAULT_ENTITY else f"user-principal '{entity}'"


def _describe_line(entity: str, configs: dict) -> str:
    who = _who(entity)
    shown = ", ".join(f"{k}={v!r}" for k, v in sorted(configs.items()))
    return f"Quota configs for {who} are {shown}"


def _pairs(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--add-config expects key=value[,key=value], got {text!r}")
        out[key.strip()] = value.strip()
    return out


def run(args: argparse.Namespace) -> int:
    if args.entity_type != "users":
        raise ConfigError(
            f"--entity-type {args.entity_type!r} is not supported; producer_ids_rate is a 'users' quota"
        )
    client, config = redis_from(args)
    store = RedisQuotaStore(client, config["pidquota.redis.prefix"])
    entity = DEFAULT_ENTITY if args.entity_default else args.entity_name
    if entity is not None:
        entity = user_entity(entity)  # alice and User:alice are the same user
    if args.alter:
        if entity is None:
            raise ConfigError("--alter needs --entity-name NAME or --entity-default")
        if not args.add_config and not args.delete_config:
            raise ConfigError("--alter needs --add-config or --delete-config")
        add = _pairs(args.add_config) if args.add_config else {}
        delete = [k.strip() for k in args.delete_config.split(",")] if args.delete_config else []
        for key in store.alter(entity, add, delete):
            print(f"({key} was not set for {_who(entity)}; nothing to delete)")
        if entity == DEFAULT_ENTITY:
            print("Completed updating default config for user-principal in the cluster.")
        else:
            print(f"Completed updating config for user-principal '{entity}'.")
        return 0
    entities = [entity] if entity is not None else store.entities()
    if entity is None and not entities:
        print("No user quota configs are set.")
    for e in entities:
        configs = store.describe(e)
        if configs:
            print(_describe_line(e, configs))
        else:
            print(f"No quota configs for {_who(e)}.")
    return 0
