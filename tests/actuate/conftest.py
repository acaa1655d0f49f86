"""The actuator's tests on the session's broker: made-up users, and a clean broker after each
test (every ACL and quota of those users removed)."""

from __future__ import annotations

import uuid

import pytest
from harness.acting import forget

from pidquota.actuate.controls import Controls
from pidquota.actuate.journal import Journal


@pytest.fixture
def cluster(kafka):
    """The session's broker, as the actuator sees it: (controls, a journal of the test's own,
    options). Whatever ACL or quota a test leaves for its users is removed afterwards: with
    allow.everyone.if.no.acl.found, one DENY on topic ``*`` would close every topic to every
    other test's users (docs/enforcing.md)."""
    options = {"kafka.bootstrap.servers": kafka.bootstrap}
    controls = Controls(options)
    journal = Journal(options, f"journal-{uuid.uuid4().hex[:8]}")
    journal.ensure()
    yield controls, journal, options
    journal.close()
    forget(controls, kafka)
    controls.close()
