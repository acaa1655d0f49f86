"""The Redis key layout, mirroring Kafka's ``/config/users/<user>``.

Entity names are sanitised the way Kafka's ``Sanitizer`` does for ZooKeeper
paths: every byte outside ``[A-Za-z0-9._~-]`` is percent-encoded, so no
principal, whatever characters it holds (``:``, ``*``, ``{``, spaces,
newlines, ``<default>`` itself), can collide with or reach into another key.
The default entity is the literal ``<default>``, which no sanitised name can be.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from quota.resolver import DEFAULT_ENTITY

DEFAULT_PREFIX = "pidquota"


def sanitize(entity: str) -> str:
    if entity == DEFAULT_ENTITY:
        return DEFAULT_ENTITY
    return quote(entity, safe="")  # letters, digits and "_.-~" stay, everything else is %XX


def desanitize(name: str) -> str:
    return name if name == DEFAULT_ENTITY else unquote(name)


class Keys:
    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        if not prefix or any(c.isspace() for c in prefix):
            raise ValueError(f"Redis key prefix must be non-empty without spaces, got {prefix!r}")
        self.prefix = prefix

    def user_config(self, entity: str) -> str:
        """Hash of one entity's configs: ``PREFIX:config:users:<sanitised>``."""
        return f"{self.prefix}:config:users:{sanitize(entity)}"

    @property
    def users_index(self) -> str:
        """Set of sanitised entity names that have configs."""
        return f"{self.prefix}:config:users"

    @property
    def config_version(self) -> str:
        """Bumped on every change, so readers reload only when something changed."""
        return f"{self.prefix}:config:version"

    def throttled_until(self, principal: str) -> str:
        return f"{self.prefix}:throttle:users:{sanitize(principal)}"

    def metrics(self, principal: str) -> str:
        return f"{self.prefix}:metrics:users:{sanitize(principal)}"

    @property
    def metrics_index(self) -> str:
        return f"{self.prefix}:metrics:users"

    def fence(self, query_id: str) -> str:
        """The last batch id applied for a query (KIP-447-style fencing)."""
        return f"{self.prefix}:fence:{sanitize(query_id)}"
