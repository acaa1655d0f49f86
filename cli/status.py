"""``pidquota status``: is a user throttled now, and for how long? What a broker plug-in asks Redis."""

from __future__ import annotations

import argparse
import time

from pidquota.cli.common import add_redis_flags, redis_from
from pidquota.conf.errors import ConfigError
from pidquota.quota.resolver import DEFAULT_ENTITY, user_entity
from pidquota.store.decisions import StatusClient


def add_parser(sub) -> argparse.ArgumentParser:
    st = sub.add_parser(
        "status",
        help="is a user throttled now, and for how long? (what a broker plug-in asks)",
        description="Show per-user throttle state and metrics that the enforcer publishes to Redis.",
    )
    add_redis_flags(st)
    st.add_argument("principal", nargs="?", help="alice or User:alice (default: every user with state)")
    st.add_argument(
        "--shadow", action="store_true", help="what a run in shadow mode (run --shadow) published instead"
    )
    return st


def _status_user(name: str) -> str:
    """The principal ``status`` shows: alice and User:alice are the same user."""
    principal = user_entity(name)
    if principal == DEFAULT_ENTITY:
        raise ConfigError(
            f"{DEFAULT_ENTITY} is a quota entity, not a user with state; give a user: alice or User:alice"
        )
    return principal


def run(args: argparse.Namespace) -> int:
    """Each user's published state, in that user's event time (see :class:`StatusClient`)."""
    client, config = redis_from(args)
    status = StatusClient(client, config["pidquota.redis.prefix"], args.shadow)
    principals = [_status_user(args.principal)] if args.principal else status.principals()
    states = [status.status(p) for p in principals]
    if not args.principal:  # the index outlives a quiet user's expired state
        gone = sum(s.now_ms is None for s in states)
        states = [s for s in states if s.now_ms is not None]
        if not states:
            print(
                f"No throttle state published: none yet, or none within {_ttl(config)} (no run publishing)."
            )
        elif gone:
            print(f"({gone} user(s) not shown: their state expired, not published within {_ttl(config)})")
    wall_ms = int(time.time() * 1000)
    for s in states:
        print(s.line())
        published = s.published(wall_ms)
        if published:
            print(f"  {published}")
        if s.metrics:
            print("  " + ", ".join(f"{k}={v}" for k, v in sorted(s.metrics.items())))
        elif args.principal:
            print("  no metrics published for this user")
    return 0


def _ttl(config) -> str:
    return f"pidquota.redis.state.ttl.ms={config['pidquota.redis.state.ttl.ms']}"
