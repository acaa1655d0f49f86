"""Settings for pidquota: defined once (``pidquota.conf.settings``), read in one place
(``pidquota.conf.loader``), validated at start-up."""

from pidquota.conf.errors import ConfigError, CorruptStateError, InputError, PidquotaError

__all__ = ["ConfigError", "CorruptStateError", "InputError", "PidquotaError"]
