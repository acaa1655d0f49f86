"""The one duration syntax of the command line (``run --duration``, ``generate --duration``).

A positive number, optionally with a unit: ``90`` (seconds), ``90s``, ``2m``,
``1h``, ``1d``, ``500ms``; decimals are fine (``1.5h``, ``.5s``). Zero, negative
numbers, an empty text and unknown units are refused with a :class:`ConfigError`
that names the flag, the value and examples.
"""

from __future__ import annotations

import re

from pidquota.conf.errors import ConfigError

_DURATION = re.compile(r"^(?P<sign>[-+]?)(?P<num>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>[A-Za-z]*)$")
_UNIT_MS = {"": 1000, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
EXAMPLES = "90 (seconds), 90s, 2m, 1h, 1d or 500ms"


def parse_duration_ms(text: str, flag: str = "--duration") -> int:
    """Milliseconds in ``text`` (see the module docstring); at least 1 ms."""
    m = _DURATION.match(str(text).strip())
    if not m:
        raise ConfigError(f"{flag} {text!r} is not a duration; use a positive number with a unit: {EXAMPLES}")
    unit = m.group("unit")
    if unit not in _UNIT_MS:
        raise ConfigError(
            f"{flag} {text!r} has an unknown unit {unit!r}; use ms, s, m, h or d, e.g. {EXAMPLES}"
        )
    ms = round(float(m.group("num")) * _UNIT_MS[unit])
    if m.group("sign") == "-" or ms < 1:
        raise ConfigError(f"{flag} {text!r} must be positive (at least 1 ms); use e.g. {EXAMPLES}")
    return ms
