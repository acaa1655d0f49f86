"""Who owns a topic, for the log audit (``formats/record_batches.py``): the record batches
carry no principal, so a topic (or a prefix) is mapped to one. Kept in a JSON file or in
the Redis hash ``{PREFIX}:topic-owners`` (``pidquota.audit.owners``).
"""

from __future__ import annotations

import json
from pathlib import Path

from pidquota.conf import jsontext
from pidquota.conf.errors import ConfigError

REDIS = "redis"  # pidquota.audit.owners: the owners are in Redis


class Owners:
    """Topic -> principal: exact names first, then the longest matching prefix (a key ending
    in ``*``), else ``Topic:<name>``. ``Owners({"orders": "User:a", "pay-*": "User:b",
    "pay-eu-*": "User:c"})`` gives ``orders`` to a, ``pay-us`` to b, ``pay-eu-1`` to c, and
    ``logs`` to ``Topic:logs``."""

    def __init__(self, mapping: dict[str, str]):
        for key, value in mapping.items():
            if (
                not isinstance(key, str)
                or not key.strip("*")
                or not isinstance(value, str)
                or ":" not in value
            ):
                raise ConfigError(
                    f"topic owner {key!r}: {value!r}: give a topic (or a PREFIX*) and a principal such as "
                    'User:alice, e.g. "orders": "User:alice"'
                )
        self.mapping = dict(mapping)
        self.exact = {k: v for k, v in mapping.items() if not k.endswith("*")}
        self.prefixes = sorted(
            ((k[:-1], v) for k, v in mapping.items() if k.endswith("*")), key=lambda kv: -len(kv[0])
        )

    def of(self, topic: str) -> str:
        if topic in self.exact:
            return self.exact[topic]
        return next((v for p, v in self.prefixes if topic.startswith(p)), f"Topic:{topic}")

    def to_json(self) -> str:
        return json.dumps(self.mapping, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Owners:
        return cls(jsontext.loads(text))

    @classmethod
    def from_redis(cls, client, key: str) -> Owners:
        """The hash ``key`` (``Keys.topic_owners``): field topic or ``PREFIX*``, value principal."""
        return cls({k.decode(): v.decode() for k, v in client.hgetall(key).items()})

    @classmethod
    def from_file(cls, path: str | Path) -> Owners:
        """``{"topics": {"orders": "User:alice", "pay-*": "User:bob"}}``."""
        try:
            doc = jsontext.loads(Path(path).read_bytes())
        except OSError as exc:
            raise ConfigError(f"pidquota.audit.owners: cannot read {path}: {exc.strerror}") from None
        except ValueError as exc:
            raise ConfigError(f"pidquota.audit.owners: {path} is not JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("topics"), dict):
            raise ConfigError(
                f'pidquota.audit.owners: {path} must be {{"topics": {{"TOPIC or PREFIX*": "User:NAME"}}}}'
            )
        try:
            return cls(doc["topics"])
        except ConfigError as exc:
            raise ConfigError(f"pidquota.audit.owners: {path}: {exc}") from None


def load_owners(config) -> Owners:
    """The owners ``pidquota.audit.owners`` names: none (every topic is ``Topic:<name>``), a
    JSON file, or ``redis`` (the hash in ``pidquota.redis.url``). Read at start-up."""
    where = config["pidquota.audit.owners"]
    if not where:
        return Owners({})
    if where != REDIS:
        return Owners.from_file(where)
    if not config["pidquota.redis.url"]:
        raise ConfigError("pidquota.audit.owners = redis needs pidquota.redis.url (or --quota-store)")
    from pidquota.store.client import connect_config
    from pidquota.store.keys import Keys

    return Owners.from_redis(connect_config(config), Keys(config["pidquota.redis.prefix"]).topic_owners)
