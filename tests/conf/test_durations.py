"""One duration syntax for `run --duration` and `generate --duration`."""

import pytest

from pidquota.conf.durations import parse_duration_ms
from pidquota.conf.errors import ConfigError


@pytest.mark.parametrize(
    "text, ms",
    [
        ("90", 90_000),
        ("15", 15_000),
        ("90s", 90_000),
        ("2m", 120_000),
        ("30m", 1_800_000),
        ("1h", 3_600_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("500ms", 500),
        ("1.5h", 5_400_000),
        ("0.5", 500),
        (".5s", 500),
        (" 2 m ", 120_000),
        ("+3s", 3000),
    ],
)
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    "text, why",
    [
        ("-5", "must be positive"),
        ("-1m", "must be positive"),
        ("0", "must be positive"),
        ("0s", "must be positive"),
        ("0.1ms", "must be positive"),
        ("", "is not a duration"),
        ("soon", "is not a duration"),
        ("1e3", "is not a duration"),
        ("5w", "unknown unit 'w'"),
        ("5M", "unknown unit 'M'"),
        ("nan", "is not a duration"),
        ("1h30m", "is not a duration"),
    ],
)
def test_bad_durations_name_the_flag_the_value_and_examples(text, why):
    with pytest.raises(ConfigError) as e:
        parse_duration_ms(text, flag="--duration")
    message = str(e.value)
    assert message.startswith(f"--duration {text!r} ") and why in message
    assert "90s, 2m, 1h" in message


def test_the_flag_is_named():
    with pytest.raises(ConfigError, match=r"^--every '-2' must be positive"):
        parse_duration_ms("-2", flag="--every")
