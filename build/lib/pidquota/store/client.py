"""The one way pidquota connects to Redis: a URL plus settings, never logging a secret."""

from __future__ import annotations

import re

from pidquota.conf.errors import PidquotaError

RETRIES = 1  # see connect()


class RedisUnavailable(PidquotaError, ConnectionError):
    """Redis did not answer."""


def redacted(url: str) -> str:
    """The URL with any user and password replaced, fit for messages."""
    return re.sub(r"//[^@/]*@", "//***@", url)


def connect(url: str, username: str = "", password: str = "", ssl_ca_certs: str = "", timeout_s: float = 2.0):
    """A ``redis.Redis`` from ``redis://`` or ``rediss://`` (TLS) plus AUTH and CA settings.

    Credentials in the settings win over ones in the URL. Raises
    :class:`RedisUnavailable` (naming the redacted URL) if it does not answer.
    A failed command is retried once at once (:data:`RETRIES`), which is what
    a pooled connection to a restarted Redis needs; redis-py's default (10
    retries with backoff) would stall each micro-batch ~5 s per call while
    Redis is down.
    """
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    if not re.match(r"^rediss?://", url):
        raise PidquotaError(
            f"{redacted(url)!r} is not a Redis URL; use redis://HOST:PORT/DB or rediss:// for TLS"
        )
    kwargs: dict = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), RETRIES),
    }
    if username:
        kwargs["username"] = username
    if password:
        kwargs["password"] = password
    if ssl_ca_certs:
        kwargs["ssl_ca_certs"] = ssl_ca_certs
    try:
        client = redis.Redis.from_url(url, **kwargs)
        client.ping()
    except redis.AuthenticationError as exc:
        raise RedisUnavailable(f"Redis at {redacted(url)} refused the credentials: {exc}") from None
    except (redis.RedisError, OSError, ValueError) as exc:
        raise RedisUnavailable(f"cannot reach Redis at {redacted(url)}: {exc}") from None
    return client


def auth_kwargs(config) -> dict:
    """AUTH and TLS settings for :func:`connect`, from the validated settings."""
    return {
        "username": config["pidquota.redis.username"],
        "password": config["pidquota.redis.password"],
        "ssl_ca_certs": config["pidquota.redis.ssl.ca.certs"],
    }


def connect_config(config, url: str | None = None):
    """:func:`connect` to ``url`` (default ``pidquota.redis.url``) with the AUTH and TLS settings."""
    return connect(url or config["pidquota.redis.url"], **auth_kwargs(config))
