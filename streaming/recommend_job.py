"""Placeholder for the Spark side of ``pidquota recommend``; another engineer replaces it.

The real module reads ``--input`` (a JSON-lines file or folder, or a Kafka
topic) in Spark batch mode and returns two pandas frames: the per-principal
statistics of :data:`streaming.recommend.STATS_COLUMNS`, equal to
:func:`streaming.recommend.reference_stats` on the same events, and, given
candidate quotas, the real enforcer's throttles per principal in the columns
of :data:`streaming.recommend.WHAT_IF_COLUMNS` (as
:func:`streaming.recommend.what_if_summary` makes of its decisions), else None.
"""

from __future__ import annotations


def compute(input_path, config, quotas):
    """``(stats, what_if or None)`` for the events at ``input_path``; ``quotas``: the candidate
    ``{entity: rate}`` of --what-if, or None. See the module docstring."""
    raise NotImplementedError("Spark side not written yet")
