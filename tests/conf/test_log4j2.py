"""conf/log4j2.properties: Spark's routine start-up lines are filtered, its real warnings are not.

Spark itself is not started: the filter's regex is read from the file and matched the way
log4j2's RegexFilter matches a message (the whole message)."""

import re

import pytest

from pidquota.conf.loader import CONF_DIR, parse_properties

PROPERTIES = parse_properties((CONF_DIR / "log4j2.properties").read_text(), "log4j2.properties")


def routine(message: str) -> bool:
    """True when the stderr appender's routine filter denies this message."""
    java = PROPERTIES["appender.stderr.filter.routine.regex"].replace("\\\\", "\\")  # .properties escapes
    return re.fullmatch(java, message) is not None


@pytest.mark.parametrize(
    "message",
    [
        # org.apache.spark.util.Utils, when another Spark on the host holds the UI port
        "Service 'SparkUI' could not bind on port 4040. Attempting port 4041.",
        "Your hostname, h resolves to a loopback address: 127.0.1.1; using 10.0.0.5 instead",
    ],
)
def test_routine_start_up_lines_are_filtered(message):
    assert PROPERTIES["appender.stderr.filter.routine.onMatch"] == "DENY"
    assert routine(message)


@pytest.mark.parametrize(
    "message",
    [
        "Lost executor 1 on 10.0.0.7: worker lost",
        "Service 'sparkDriver' could not bind on a random free port. You may check whether configuring "
        "an appropriate binding address.",
    ],
)
def test_real_warnings_pass(message):
    assert not routine(message)
