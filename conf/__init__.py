"""Settings for pidquota: defined once (``conf.settings``), read in one place
(``conf.loader``), validated at start-up."""

from conf.errors import ConfigError, CorruptStateError, InputError, PidquotaError

__all__ = ["ConfigError", "CorruptStateError", "InputError", "PidquotaError"]
