"""Made-up users for the actuator's tests, and what they leave on a broker removed."""

from __future__ import annotations

import time
import uuid

from pidquota.actuate.controls import ClientQuotaKey, Controls, QuotaKey

USERS: list[str] = []  # every user a test made up: its ACLs and quotas go at the end of the test


def new_user() -> str:
    """A user name no other test uses (``u`` + 8 hex digits), cleaned up after the test."""
    USERS.append(f"u{uuid.uuid4().hex[:8]}")
    return USERS[-1]


def forget(controls: Controls, broker) -> None:
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )

    admin = broker.admin()
    everything = ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)
    try:
        for user in USERS:
            for key in controls.quotas("user", user):
                controls.write(QuotaKey("user", user, key), None)
            for client, keys in client_quotas(controls, user).items():
                for key in keys:
                    controls.write(ClientQuotaKey(user, client, key), None)
            mine = ACLFilter(f"User:{user}", None, ACLOperation.ANY, ACLPermissionType.ANY, everything)
            admin.delete_acls([mine])
            _until_gone(admin, mine)
    finally:
        admin.close()
        USERS.clear()


def _until_gone(admin, acls, seconds: float = 15.0) -> None:
    """A deleted ACL leaves the broker's authorizer once the controller's record reaches it
    (KRaft's metadata log): a describe just after the delete may still list it."""
    deadline = time.monotonic() + seconds
    while (left := admin.describe_acls(acls)[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == [], f"ACLs still there {seconds} s after their delete: {left}"


def client_quotas(controls: Controls, user: str) -> dict[str | None, dict[str, float]]:
    """Every (user, client-id) quota of ``user``, by client id (None: its ``<default>`` client)."""
    from kafka.protocol.admin import DescribeClientQuotasRequest

    component = DescribeClientQuotasRequest.ComponentData(entity_type="user", match_type=0, match=user)
    response = controls._send(DescribeClientQuotasRequest(components=[component], strict=False), "describe")
    out: dict[str | None, dict[str, float]] = {}
    for entry in response.entries or []:
        names = {e.entity_type: e.entity_name for e in entry.entity}
        if "client-id" in names:
            out[names["client-id"]] = {v.key: v.value for v in entry.values}
    return out
