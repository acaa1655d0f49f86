"""The project's exception root.

Every error pidquota raises on purpose derives from :class:`PidquotaError`, so a
caller (the CLI, a test, an embedding job) can catch "ours" in one place and
print the message alone. Each subclass also derives from the matching builtin
(``ValueError`` and friends) so generic handlers keep working.
"""


class PidquotaError(Exception):
    """Root of all errors raised by pidquota on purpose."""


class ConfigError(PidquotaError, ValueError):
    """A setting or quota is unknown, mistyped or out of range.

    The message names the key (or quota entity), the offending value and the fix.
    """


class CorruptStateError(PidquotaError, ValueError):
    """A serialized state blob is truncated, foreign or from an unknown version."""


class InputError(PidquotaError, OSError):
    """An input path or source cannot be read."""
