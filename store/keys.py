"""The Redis key layout, mirroring Kafka's ``/config/users/<user>``.

Every key starts with the hash tag ``{PREFIX}``, so all of pidquota's keys
live in one Redis Cluster slot, and every Lua script and MULTI/WATCH
transaction (which may only touch one slot) is valid on a cluster too:

==================================== ===================================================
``{P}:config:users:<name>``          hash: one entity's configs (``producer_ids_rate``)
``{P}:config:users``                 set: sanitised names of entities with configs
``{P}:config:version``               counter: bumped by every ``configs --alter``
``{P}:config:generation``            random token: set by the first ``--alter`` on an
                                     empty store; gone means the store was emptied
``{P}:users:<name>``                 hash: one user's published throttle state
``{P}:users``                        set: principals with published state
``{P}:fence:<query id>``             hash: ``generation`` and ``batch`` of the writer
``{P}:shadow:users:<name>``, ...     the same three, published by a run in shadow mode
``{P}:pid-blocks:*``                 the traffic generator's KIP-730 block store
``{P}:topic-owners``                 hash: topic (or ``PREFIX*``) -> principal, for the log audit
==================================== ===================================================

Entity names are sanitised the way Kafka's ``Sanitizer`` does for ZooKeeper
paths: every byte outside ``[A-Za-z0-9._~-]`` is percent-encoded, so no
principal, whatever characters it holds (``:``, ``*``, ``{``, spaces,
newlines, ``<default>`` itself), can collide with or reach into another key,
or open a hash tag of its own. The default entity is the literal
``<default>``, which no sanitised name can be.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from pidquota.conf.errors import ConfigError
from pidquota.quota.resolver import DEFAULT_ENTITY

DEFAULT_PREFIX = "pidquota"


def sanitize(entity: str) -> str:
    if entity == DEFAULT_ENTITY:
        return DEFAULT_ENTITY
    return quote(entity, safe="")  # letters, digits and "_.-~" stay, everything else is %XX


def desanitize(name: str) -> str:
    return name if name == DEFAULT_ENTITY else unquote(name)


class Keys:
    """Key names under one prefix, all in the Redis Cluster slot of ``{prefix}``."""

    def __init__(self, prefix: str = DEFAULT_PREFIX, shadow: bool = False) -> None:
        if not prefix or any(c.isspace() or c in "{}" for c in prefix):
            raise ConfigError(
                f"pidquota.redis.prefix must be non-empty without spaces, '{{' or '}}', got {prefix!r}; "
                "pidquota adds the braces of the hash tag itself"
            )
        self.prefix = prefix
        self.tag = "{" + prefix + "}"
        # Where throttle state is published: a shadow run's never where brokers look.
        self.published = self.tag + (":shadow" if shadow else "")

    def user_config(self, entity: str) -> str:
        """Hash of one entity's configs: ``{PREFIX}:config:users:<sanitised>``."""
        return f"{self.users_index}:{sanitize(entity)}"

    @property
    def users_index(self) -> str:
        """Set of sanitised entity names that have configs."""
        return f"{self.tag}:config:users"

    @property
    def config_version(self) -> str:
        """Bumped on every change, so readers reload only when something changed."""
        return f"{self.tag}:config:version"

    @property
    def config_generation(self) -> str:
        """Set once per store lifetime: if it vanishes, the store was emptied, not edited."""
        return f"{self.tag}:config:generation"

    def user_state(self, principal: str) -> str:
        """Hash of one user's published throttle state and metrics."""
        return f"{self.state_index}:{sanitize(principal)}"

    @property
    def state_index(self) -> str:
        """Set of principals (as they are, not sanitised) with published state."""
        return f"{self.published}:users"

    def fence(self, query_id: str) -> str:
        """The writer generation and last batch of a query (KIP-447-style fencing)."""
        return f"{self.published}:fence:{sanitize(query_id)}"

    @property
    def topic_owners(self) -> str:
        """Hash: topic (or ``PREFIX*``) -> principal, for the log audit (``store/owners.py``)."""
        return f"{self.tag}:topic-owners"

    @property
    def pid_blocks(self) -> str:
        """Prefix of the traffic generator's KIP-730 block store (``traffic/blocks.py``)."""
        return f"{self.tag}:pid-blocks"
