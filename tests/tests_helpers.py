"""Helpers importable from test modules (conftest holds the fixtures)."""

from conftest import read_output, start_redis, write_events

__all__ = ["read_output", "start_redis", "write_events"]
