"""What the Kafka source, sink and CLI share: URLs, client options, secrets."""

from __future__ import annotations

import re
from dataclasses import dataclass

from conf.errors import ConfigError, PidquotaError

# pidquota option key -> kafka-python keyword. The same keys are Spark data
# source options; Spark redacts option values whose key says "password".
CLIENT_OPTIONS = {
    "kafka.security.protocol": "security_protocol",
    "kafka.sasl.mechanism": "sasl_mechanism",
    "kafka.sasl.username": "sasl_plain_username",
    "kafka.sasl.password": "sasl_plain_password",
    "kafka.ssl.cafile": "ssl_cafile",
}
SECRET_OPTIONS = {"kafka.sasl.password"}


class KafkaError(PidquotaError):
    """Kafka could not be reached, or data the query needs is gone."""


@dataclass(frozen=True)
class KafkaUrl:
    bootstrap: str
    topic: str

    @classmethod
    def parse(cls, url: str) -> KafkaUrl:
        m = re.match(r"^kafka://([^/]+)/([A-Za-z0-9._-]+)$", url)
        if not m:
            raise ConfigError(f"{url!r} is not a Kafka URL; use kafka://HOST:PORT[,HOST:PORT]/TOPIC")
        return cls(m.group(1), m.group(2))


def normalized(options) -> dict:
    """Spark hands data source options over with lower-cased keys; so does this,
    so that code and tests look options up one way."""
    return {str(k).lower(): v for k, v in dict(options).items()}


def client_kwargs(options: dict) -> dict:
    """kafka-python keyword arguments from pidquota's ``kafka.*`` options."""
    kwargs = {"bootstrap_servers": options["kafka.bootstrap.servers"].split(",")}
    for key, kw in CLIENT_OPTIONS.items():
        if options.get(key):
            kwargs[kw] = options[key]
    return kwargs


def safe_options(options: dict) -> dict:
    """Options fit for a log line: secrets replaced."""
    return {k: ("<redacted>" if k in SECRET_OPTIONS else v) for k, v in options.items()}


def security_options(config) -> dict:
    """The ``kafka.*`` client options from the validated settings."""
    out = {}
    for key in CLIENT_OPTIONS:
        value = config[f"pidquota.{key}"]
        if value:
            out[key] = value
    return out
