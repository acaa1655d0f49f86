"""What the tests run against: real servers on free loopback ports (redis-server, Prometheus,
Apache Kafka, a Spark standalone cluster), the CLI in a subprocess, the query run once on a
folder, and the Grafana dashboard's queries. Fixtures that hand these out are in
``tests/conftest.py``; this package holds the machinery, importable as ``harness``.

Every server or process a test starts here checks that the test carries the marker of what
it starts (:func:`require`), so the quick tier (``pytest -m quick``) can never start one by
accident: a test that starts redis-server without the ``redis`` marker fails and says so.
"""

from __future__ import annotations

import pytest

# The test running now (set by tests/conftest.py before each test's setup).
current: pytest.Item | None = None


def require(marker: str, what: str) -> None:
    """Fail the running test unless it is marked ``marker`` (``what`` is what it starts)."""
    if current is not None and current.get_closest_marker(marker) is None:
        pytest.fail(
            f"{current.nodeid} starts {what} but is not marked {marker!r}: use the fixture that "
            f"provides it, or mark the test or its module with pytest.mark.{marker}",
            pytrace=False,
        )
