"""Which ``producer_ids_rate`` applies to a principal."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from pidquota.conf import jsontext
from pidquota.conf.errors import ConfigError, InputError

DEFAULT_ENTITY = "<default>"
QUOTA_KEY = "producer_ids_rate"
# The smallest quota: one new PID per million windows. Below it a throttle time
# (1 / R windows) no longer fits the int64 milliseconds Spark carries it in.
MIN_RATE = 1e-6
USER_PREFIX = "User:"
# A principal type before the name, e.g. "Group:" or "user:": only "User:" names a user entity.
_TYPE_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*:")


class QuotaSource(Protocol):
    """Where quotas come from (the JSON file or Redis).

    ``snapshot()`` returns the current ``{entity: rate}`` map; the enforcer
    calls it once per micro-batch, never per event. ``stale`` is True while
    the quotas may be out of date: the store could not be read, so the last
    known quotas are in force (the metrics rows say ``quota_stale``).
    """

    stale: bool

    def snapshot(self) -> Mapping[str, float]: ...


def resolve(quotas: Mapping[str, float], principal: str) -> float | None:
    """``users/<principal>``, else ``users/<default>``, else None (unlimited)."""
    rate = quotas.get(principal)
    if rate is None:
        rate = quotas.get(DEFAULT_ENTITY)
    return rate


def user_entity(name: str) -> str:
    """The user quota entity that ``name`` means, as kafka-configs.sh's ``--entity-name``.

    ``<default>`` is the default entity; ``User:alice`` is itself; a bare name
    means a user, so ``alice`` is ``User:alice``. Refused with a
    :class:`ConfigError` naming the fix: an empty name, ``User:`` alone,
    ``User:<default>``, and another principal type before a colon
    (``Group:x``, ``user:x``; a user named so is written ``User:Group:x``).
    A colon after other characters is part of the name: ``CN=a:b`` is
    ``User:CN=a:b``.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(
            f"user entity name {name!r} is empty; give User:NAME, a bare NAME or {DEFAULT_ENTITY}"
        )
    if name == DEFAULT_ENTITY:
        return name
    if name.startswith(USER_PREFIX):
        user = name[len(USER_PREFIX) :]
        if not user.strip():
            raise ConfigError(f"user entity name {name!r} has no user after 'User:'; write e.g. User:alice")
        if user == DEFAULT_ENTITY:
            raise ConfigError(f"user entity name {name!r}: the default entity is written {DEFAULT_ENTITY}")
        return name
    prefix = _TYPE_PREFIX.match(name)
    if prefix:
        raise ConfigError(
            f"user entity name {name!r} names a {prefix.group(0)[:-1]!r} principal, and quotas are per "
            f"user; if {name!r} is the user's name, write User:{name}"
        )
    return USER_PREFIX + name


def validate_rate(entity: str, value: object) -> float:
    """A positive, finite number, or a :class:`ConfigError` naming the entity."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{QUOTA_KEY} for {entity!r} must be a positive number, got {value!r}")
    try:
        rate = float(value)
    except ValueError:
        raise ConfigError(f"{QUOTA_KEY} for {entity!r} must be a positive number, got {value!r}") from None
    if not math.isfinite(rate) or rate <= 0:
        raise ConfigError(
            f"{QUOTA_KEY} for {entity!r} must be a positive number, got {value!r}; "
            "remove the entry to leave the user unlimited"
        )
    if rate < MIN_RATE:
        raise ConfigError(
            f"{QUOTA_KEY} for {entity!r} is {value!r}, below the smallest quota {MIN_RATE:g} "
            f"(one new PID per {1 / MIN_RATE:,.0f} windows); use at least {MIN_RATE:g}"
        )
    return int(rate) if rate.is_integer() else rate


def parse_quotas(doc: object, origin: str = "quota file") -> dict[str, float]:
    """Validate ``{"users": {"User:alice": {"producer_ids_rate": 100}, ...}}``. An entity is read
    as kafka-configs.sh names it (:func:`user_entity`): ``crash-loop`` is ``User:crash-loop``, so
    a file written as ``--entity-name`` takes it throttles that user, not no one; two names of
    one user (``alice`` and ``User:alice``) are refused."""
    if not isinstance(doc, dict) or set(doc) - {"users"}:
        extra = sorted(set(doc) - {"users"}) if isinstance(doc, dict) else None
        raise ConfigError(
            f"{origin}: top level must be an object with only a 'users' key"
            + (f"; unknown key(s) {extra}" if extra else "")
        )
    users = doc.get("users", {})
    if not isinstance(users, dict):
        raise ConfigError(f"{origin}: 'users' must be an object of entity -> configs")
    quotas: dict[str, float] = {}
    named: dict[str, str] = {}  # the user entity -> the name the file gave it
    for entity, configs in users.items():
        if not isinstance(entity, str) or not entity.strip():
            raise ConfigError(f"{origin}: user entity names must be non-empty strings, got {entity!r}")
        if not isinstance(configs, dict):
            raise ConfigError(f"{origin}: configs of {entity!r} must be an object")
        unknown = sorted(set(configs) - {QUOTA_KEY})
        if unknown:
            raise ConfigError(
                f"{origin}: unknown config key(s) {unknown} for {entity!r}; the only key is {QUOTA_KEY!r}"
            )
        try:
            user = user_entity(entity)
        except ConfigError as exc:
            raise ConfigError(f"{origin}: {exc}") from None
        if user in named:
            raise ConfigError(f"{origin}: {named[user]!r} and {entity!r} both name {user}; keep one of them")
        named[user] = entity
        if QUOTA_KEY in configs:
            quotas[user] = _json_rate(entity, configs[QUOTA_KEY])
    return quotas


def _json_rate(entity: str, value: object) -> float:
    """A rate from the JSON file: a JSON number only, as the event parser wants.

    ``"50"`` is refused: the file is typed, and a quoted number is a string.
    (Redis and the ``configs`` CLI hand over text, so :func:`validate_rate`
    itself still takes numeric strings.)
    """
    if isinstance(value, str):
        fix = (
            f"write {value.strip()} without quotes"
            if _is_number(value)
            else "write a positive number, e.g. 100"
        )
        raise ConfigError(
            f"{QUOTA_KEY} for {entity!r} must be a JSON number, got the string {json.dumps(value)}; {fix}"
        )
    return validate_rate(entity, value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class StaticQuotas:
    """Quotas from a fixed mapping or the embedded JSON file. Never stale."""

    stale = False

    def __init__(self, quotas: Mapping[str, float]) -> None:
        self._quotas = {e: validate_rate(e, r) for e, r in quotas.items()}

    @classmethod
    def from_file(cls, path: str | Path) -> StaticQuotas:
        path = Path(path)
        try:
            text = path.read_bytes()  # json reads UTF-8 bytes; bytes that are not are a ValueError
        except OSError as exc:
            raise InputError(f"cannot read quota file {str(path)!r}: {exc.strerror or exc}") from None
        try:
            doc = jsontext.loads(text)
        except ValueError as exc:
            raise ConfigError(f"quota file {str(path)!r} is not valid JSON: {exc}") from None
        return cls(parse_quotas(doc, origin=f"quota file {str(path)!r}"))

    def snapshot(self) -> Mapping[str, float]:
        return dict(self._quotas)
