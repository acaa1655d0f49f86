"""Cold start from the log: which events only rebuild state (``--replay-until``, ``--rebuild``).

A principal's state is derivable from its last W + W/layer.count of events:
a PID is remembered at most that long after its last sighting, and a bucket
refills completely within W. So a run that lost its checkpoint replays
that span before the moment it takes over, and enforces from there.
"""

from __future__ import annotations

from pidquota.conf.errors import ConfigError
from pidquota.quota import QuotaSettings

KEY = "pidquota.replay.until"
EARLIEST_MS = 946_684_800_000  # 2000-01-01: anything earlier is a unit slip (seconds), not a time
LEEWAY_MS = 86_400_000  # a day ahead of this clock: clock skew, not a time in the future


def replay_until(value: str, recorded: int | None, has_progress: bool, now_ms: int) -> tuple[int | None, str]:
    """The replay time in force (epoch ms, or None), and a line saying why, or "".

    * ``""``: the checkpoint's recorded time, if any (a restart keeps replaying
      exactly the events it replayed before, and no newer ones);
    * ``"now"``: ``now_ms`` on a new checkpoint; on one with progress, its recorded
      time (a restarted ``--rebuild``), or none (its state is already there);
    * digits: that time in ms, from 2000-01-01 to a day ahead of ``now_ms``.
    """
    text = value.strip()
    if text == "":
        return recorded, ""
    if text == "now":
        if not has_progress:
            return now_ms, ""
        if recorded is not None:
            return recorded, f"the checkpoint was rebuilt up to {recorded} (epoch ms); keeping that"
        return None, "the checkpoint already holds state, so --rebuild has nothing to rebuild; enforcing"
    if text.isdigit() and EARLIEST_MS <= int(text) <= now_ms + LEEWAY_MS:
        return int(text), ""
    hint = ""
    if text.isdigit() and int(text) < EARLIEST_MS and int(text) * 1000 >= EARLIEST_MS:
        hint = f" ({text} looks like seconds: --replay-until {int(text) * 1000})"
    elif text.isdigit():
        hint = " (it is not between 2000-01-01 and a day from now)"
    raise ConfigError(
        f"{KEY} (--replay-until) must be an epoch time in milliseconds or 'now', got {value!r}{hint}; "
        "e.g. --replay-until 1767225600000, or --rebuild"
    )


def replay_start_ms(until_ms: int, settings: QuotaSettings) -> int:
    """Where a replay must begin: W + W/layer.count before ``until_ms``.

    Example: W = 1 h with 4 layers, until = 12:00: the replay reads from
    10:45, the oldest sighting a PID can still be remembered by at 12:00.
    """
    span = settings.window_ms + settings.window_ms // settings.layer_count
    return max(0, until_ms - span)
