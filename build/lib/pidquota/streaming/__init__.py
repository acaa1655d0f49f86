"""Spark glue: the streaming query, its sources and sinks, and the CLI.

Quota logic lives in ``quota`` and ``bloom``; nothing here decides anything.
"""
