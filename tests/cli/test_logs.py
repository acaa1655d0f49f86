"""The CLI's own lines from the modules' loggers (cli/logs.py)."""

from __future__ import annotations

import logging

from pidquota.cli import logs


def test_warnings_and_each_brokers_verdict_are_said_other_info_is_not(capsys):
    """Issue 53, tried as a new user: the run said a broker that does not obey, but never the one
    that does (an INFO line, dropped): each broker's verdict is the run's own line either way."""
    with logs.to_stderr():
        logging.getLogger("pidquota.actuate.brokers").info(
            "actuator: broker 1 obeys pidquota's plug-in state (x)"
        )
        logging.getLogger("pidquota.actuate.brokers").warning(
            "actuator: broker 2 does NOT obey pidquota's plug-in state: y"
        )
        logging.getLogger("pidquota.actuate").info("actuator: apply something")
        logging.getLogger("pidquota.store").warning("pidquota: Redis is down")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "pidquota: actuator: broker 1 obeys pidquota's plug-in state (x)",
        "pidquota: warning: actuator: broker 2 does NOT obey pidquota's plug-in state: y",
        "pidquota: warning: Redis is down",
    ]
    logging.getLogger("pidquota.actuate.brokers").info("after the command: not said")
    assert capsys.readouterr().err == ""
