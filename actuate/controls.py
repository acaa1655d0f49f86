"""Kafka's own controls, as the actuator reads and changes them: client quotas
(DescribeClientQuotas and AlterClientQuotas, KIP-546, through kafka-python's protocol
classes: neither Python client has an admin call for them) and ACLs (kafka-python's
``describe_acls``, ``create_acls`` and ``delete_acls``).

A control is one thing pidquota may set and must be able to put back exactly:

* :class:`QuotaKey`: one key of one quota entity, e.g. ``request_percentage`` of
  ``user=alice``. Its value is a float, or None when the entity has no such key.
* :class:`AclBinding`: one ACL binding. Its value is True when the cluster has it.

Worked example: ``controls.read(QuotaKey("user", "alice", "request_percentage"))`` is None
on a cluster where nobody set it; after ``controls.write(key, 1.0)`` it is 1.0, and
``controls.write(key, None)`` removes the key again (the entity's other keys untouched).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pidquota.conf.errors import PidquotaError
from pidquota.store import kafka as kafka_store

SEEN_WITHIN_S = 2.0  # how long a write waits for a read to show it (metadata propagation)


class ControlError(PidquotaError):
    """Kafka refused to show or change a control (or did not answer)."""


@dataclass(frozen=True, order=True)
class QuotaKey:
    """One key of a client-quota entity: ``entity_type`` is ``user``, ``client-id`` or
    ``ip``; ``entity`` its name (a user without ``User:``)."""

    entity_type: str
    entity: str
    key: str

    @property
    def name(self) -> str:
        return f"quota {self.entity_type}={self.entity} {self.key}"


@dataclass(frozen=True, order=True)
class ClientQuotaKey:
    """One key of the (user, client-id) quota entity: ``user`` without ``User:``;
    ``client_id`` a client id, or None for the user's ``<default>`` client
    (``kafka-configs.sh --entity-type users --entity-name U --entity-type clients
    --entity-default``). Kafka's precedence puts it before the user's own quota, for that
    client id (or, the default, for every client id of the user without a quota of its own):
    the closed loop's narrower, stricter step (``actuate/escalation.py``)."""

    user: str
    client_id: str | None
    key: str

    @property
    def name(self) -> str:
        client = "<default>" if self.client_id is None else self.client_id
        return f"quota user={self.user},client-id={client} {self.key}"

    @property
    def components(self) -> list[tuple[str, str | None]]:
        return [("user", self.user), ("client-id", self.client_id)]


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL binding, as ``kafka-acls.sh`` writes it: ``principal`` (``User:alice``),
    ``operation`` (``WRITE``, ``IDEMPOTENT_WRITE``...), ``permission`` (``DENY``/``ALLOW``),
    ``resource_type`` (``TOPIC``, ``CLUSTER``, ``TRANSACTIONAL_ID``), ``resource`` and its
    ``pattern`` (``LITERAL``/``PREFIXED``), from ``host``."""

    principal: str
    operation: str
    permission: str
    resource_type: str
    resource: str
    pattern: str = "LITERAL"
    host: str = "*"

    @property
    def name(self) -> str:
        return (
            f"acl {self.permission} {self.operation} on {self.resource_type}:{self.resource}"
            f"{'' if self.pattern == 'LITERAL' else f' ({self.pattern})'} for {self.principal}"
            f"{'' if self.host == '*' else f' from {self.host}'}"
        )


@dataclass(frozen=True, order=True)
class ThrottleKey:
    """pidquota's entry for ``principal`` in the broker plug-in's state topic
    (``actuate/plugin_state.py``): present (True) while the plug-in refuses its new PIDs."""

    principal: str

    @property
    def name(self) -> str:
        return f"plug-in throttle for {self.principal}"


@dataclass(frozen=True, order=True)
class ClientThrottleKey:
    """pidquota's entry for one client id of ``principal`` in the plug-in's state topic:
    present (True) while the plug-in refuses that client id's new PIDs, and only its (the
    narrowed throttle: the user's other applications are served)."""

    principal: str
    client_id: str

    @property
    def name(self) -> str:
        return f"plug-in throttle for {self.principal} client id {self.client_id}"


Control = QuotaKey | ClientQuotaKey | AclBinding | ThrottleKey | ClientThrottleKey


def same_value(a, b) -> bool:
    """Two values of one control are the same: quotas within 1e-9, ACLs present or not."""
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) < 1e-9
    return a == b


def shown_value(value) -> str:
    """A control's value in a line: ``absent``, ``present`` or the quota (``1``, ``0.5``)."""
    if value is None or value is False:
        return "absent"
    return "present" if value is True else f"{value:g}" if isinstance(value, float) else str(value)


class Controls:
    """The controls of one cluster, through one admin client (``store/kafka.py``'s
    ``admin``). :meth:`read` and :meth:`write` take either kind of control."""

    def __init__(
        self, options: dict, timeout_ms: int = 30_000, connect_timeout_ms: int | None = None, state=None
    ):
        connect = {} if connect_timeout_ms is None else {"bootstrap_timeout_ms": connect_timeout_ms}
        self._admin = kafka_store.admin(options, request_timeout_ms=timeout_ms, **connect)
        self._where = options["kafka.bootstrap.servers"]
        self.state = state  # the plug-in's state topic (plugin_state.PluginState), for ThrottleKey

    def close(self) -> None:
        self._admin.close()
        if self.state is not None:
            self.state.close()

    def read(self, control: Control):
        if isinstance(control, ThrottleKey | ClientThrottleKey):
            return self._plugin().read(control.principal, getattr(control, "client_id", None))
        if isinstance(control, QuotaKey | ClientQuotaKey):
            return self._read_quota(control)
        return self._has_acl(control)

    def _plugin(self):
        if self.state is None:
            raise ControlError(
                "a plug-in throttle, and no state topic: set pidquota.actuator.mechanism=broker-plugin"
            )
        return self.state

    def write(self, control: Control, value) -> None:
        """Set ``control`` to ``value``: a quota key to a float (None removes it), an ACL
        binding present (True) or absent (False)."""
        if isinstance(control, QuotaKey | ClientQuotaKey):
            self._write_quota(control, value)
        elif isinstance(control, ThrottleKey | ClientThrottleKey):
            self._plugin().write(control.principal, bool(value), getattr(control, "client_id", None))
        elif value:
            self._create_acl(control)
        else:
            self._delete_acl(control)
        self._until_seen(control, value)

    def _until_seen(self, control: Control, value) -> None:
        """Wait (at most ``SEEN_WITHIN_S``) until a read shows the change: Kafka answers once
        the controller has the record, and the broker that answers a read may apply it a few
        ms later. So a read after a write sees the write (the actuator's undo and a restart's
        reconcile compare what they read with what was written)."""
        want = value if isinstance(control, QuotaKey | ClientQuotaKey) else bool(value)
        deadline = time.monotonic() + SEEN_WITHIN_S
        while not same_value(self.read(control), want) and time.monotonic() < deadline:
            time.sleep(0.02)

    # -- quotas ------------------------------------------------------------------------
    def _send(self, request, what: str):
        try:
            # kafka-python 3's own admin calls send this way (admin/_acls.py); it has no public
            # call for a request of the caller's choosing, and no client-quota call at all
            return self._admin._manager.run(self._admin._manager.send, request)
        except Exception as exc:  # kafka-python raises several kinds here
            raise ControlError(
                f"Kafka at {self._where} did not {what}: {type(exc).__name__}: {exc}"
            ) from None

    def quotas(self, entity_type: str, entity: str) -> dict[str, float]:
        """Every key of one quota entity (exact match, that entity alone)."""
        return self._entity_quotas([(entity_type, entity)])

    def _entity_quotas(self, components: list[tuple[str, str | None]]) -> dict[str, float]:
        """Every key of the entity of ``components`` (type, name; a None name: the type's
        ``<default>``), that entity alone."""
        from kafka.protocol.admin import DescribeClientQuotasRequest

        shown = ",".join(f"{t}={'<default>' if n is None else n}" for t, n in components)
        what = f"describe the quotas of {shown}"
        request = DescribeClientQuotasRequest(
            components=[
                DescribeClientQuotasRequest.ComponentData(
                    entity_type=t, match_type=1 if n is None else 0, match=n
                )
                for t, n in components
            ],
            strict=True,
        )
        response = self._send(request, what)
        _check(response, what)
        out: dict[str, float] = {}
        for entry in response.entries or []:
            if _by_type((e.entity_type, e.entity_name) for e in entry.entity) == _by_type(components):
                out.update({v.key: v.value for v in entry.values})
        return out

    def authorizers(self) -> dict[int, str]:
        """Each broker's ``authorizer.class.name`` (DescribeConfigs), by broker id ("" for none)."""
        name = "authorizer.class.name"
        return {i: found[name] for i, found in self.broker_configs(name).items()}

    def grants_explicitly(self) -> tuple[bool, str]:
        """Whether a DENY ACL can close resources to its user alone, as far as the brokers show:
        every broker runs an authorizer, and none shows ``allow.everyone.if.no.acl.found=true``.
        Kafka reports that setting as sensitive (it is the authorizer's, not a broker config
        Kafka knows), so its value is mostly hidden: then the operator's word stands, and the
        reason says so."""
        names = ("authorizer.class.name", "allow.everyone.if.no.acl.found")
        found = self.broker_configs(*names)
        none = sorted(i for i, c in found.items() if not c[names[0]])
        loose = sorted(i for i, c in found.items() if c[names[1]].lower() == "true")
        if not found or none:
            return False, f"brokers {none} run no authorizer (no ACL is enforced there)"
        if loose:
            return False, f"brokers {loose} have allow.everyone.if.no.acl.found=true"
        return (
            True,
            f"every broker ({len(found)}) runs an authorizer; allow.everyone.if.no.acl.found is as the operator says",
        )

    def allows(self, principal: str) -> bool:
        """Whether any ALLOW ACL names ``principal``: where the cluster grants explicitly, a
        user that writes has one."""
        from kafka.admin import (
            ACLFilter,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePatternFilter,
            ResourceType,
        )

        anything = ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)
        wanted = ACLFilter(principal, None, ACLOperation.ANY, ACLPermissionType.ALLOW, anything)
        return bool(self._describe_acls(wanted, f"the ACLs of {principal}"))

    def _describe_acls(self, wanted, what: str) -> list:
        """The ACLs that match the filter ``wanted``, or a ControlError naming ``what``."""
        try:
            found, error = self._admin.describe_acls(wanted)
        except Exception as exc:  # kafka-python raises several kinds here
            raise ControlError(f"Kafka at {self._where} did not describe {what}: {exc}") from None
        if getattr(error, "errno", 0):
            raise ControlError(f"Kafka at {self._where} refused to describe {what}: {error}")
        return found

    def topic_writers(self, topic: str) -> list[AclBinding]:
        """Every ALLOW ACL that lets a principal write ``topic`` (WRITE or ALL; literal,
        prefixed or wildcard: Kafka's MATCH filter)."""
        return [
            b for b in self.topic_acls(topic) if b.permission == "ALLOW" and b.operation in ("WRITE", "ALL")
        ]

    def topic_acls(self, topic: str) -> list[AclBinding]:
        """Every ACL that matches ``topic`` (literal, prefixed or wildcard: Kafka's MATCH
        filter), of any operation, ALLOW or DENY: where there is none,
        ``allow.everyone.if.no.acl.found`` decides who may use it."""
        from kafka.admin import (
            ACLFilter,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePatternFilter,
            ResourceType,
        )

        matching = ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.MATCH)
        wanted = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY, matching)
        found = self._describe_acls(wanted, f"the ACLs of topic {topic!r}")
        return [
            AclBinding(
                a.principal,
                a.operation.name,
                a.permission_type.name,
                "TOPIC",
                a.resource_pattern.resource_name,
                pattern=a.resource_pattern.pattern_type.name,
                host=a.host,
            )
            for a in found
        ]

    def broker_configs(self, *names: str) -> dict[int, dict[str, str]]:
        """Each broker's value of each of ``names`` (DescribeConfigs, by broker id; "" for none)."""
        from kafka.admin import ConfigResource, ConfigResourceType

        try:
            ids = [b["broker_id"] for b in self._admin.describe_cluster().get("brokers", [])]
            found = self._admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, str(i), dict.fromkeys(names)) for i in ids],
                config_filter="all",  # a static setting: not among the "modified" ones
            )
        except Exception as exc:  # kafka-python raises several kinds here
            raise ControlError(
                f"Kafka at {self._where} did not describe its brokers' configs: {exc}"
            ) from None
        brokers = found.get("broker", {}) if isinstance(found, dict) else {}
        return {
            int(i): {n: str((brokers.get(str(i), {}).get(n) or {}).get("value") or "") for n in names}
            for i in ids
        }

    def default_quota(self, key: QuotaKey) -> float | None:
        """``key``'s value on the entity type's ``<default>`` entity (``kafka-configs.sh
        --entity-default``), which applies to every entity of the type without a value of its
        own: a value set on the entity overrides it (Kafka's precedence)."""
        from kafka.protocol.admin import DescribeClientQuotasRequest

        what = f"describe the quotas of the {key.entity_type} <default>"
        component = DescribeClientQuotasRequest.ComponentData(
            entity_type=key.entity_type, match_type=1, match=None
        )
        response = self._send(DescribeClientQuotasRequest(components=[component], strict=True), what)
        _check(response, what)
        for entry in response.entries or []:
            if [(e.entity_type, e.entity_name) for e in entry.entity] == [(key.entity_type, None)]:
                return next((v.value for v in entry.values if v.key == key.key), None)
        return None

    def _read_quota(self, key: QuotaKey | ClientQuotaKey) -> float | None:
        return self._entity_quotas(_components(key)).get(key.key)

    def _write_quota(self, key: QuotaKey | ClientQuotaKey, value: float | None) -> None:
        from kafka.protocol.admin import AlterClientQuotasRequest

        entry = AlterClientQuotasRequest.EntryData(
            entity=[
                AlterClientQuotasRequest.EntryData.EntityData(entity_type=t, entity_name=n)
                for t, n in _components(key)
            ],
            ops=[
                AlterClientQuotasRequest.EntryData.OpData(
                    key=key.key, value=0.0 if value is None else float(value), remove=value is None
                )
            ],
        )
        what = f"set {key.name} to {value}" if value is not None else f"remove {key.name}"
        response = self._send(AlterClientQuotasRequest(entries=[entry], validate_only=False), what)
        for result in response.entries or []:
            _check(result, what)

    # -- ACLs --------------------------------------------------------------------------
    def _acl(self, binding: AclBinding):
        from kafka.admin import (
            ACL,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePattern,
            ResourceType,
        )

        pattern = ResourcePattern(
            ResourceType[binding.resource_type],
            binding.resource,
            ACLResourcePatternType[binding.pattern],
        )
        return ACL(
            binding.principal,
            binding.host,
            ACLOperation[binding.operation],
            ACLPermissionType[binding.permission],
            pattern,
        )

    def _has_acl(self, binding: AclBinding) -> bool:
        from kafka.admin import ACLFilter

        acl = self._acl(binding)
        wanted = ACLFilter(acl.principal, acl.host, acl.operation, acl.permission_type, acl.resource_pattern)
        try:
            found, error = self._admin.describe_acls(wanted)
        except Exception as exc:  # kafka-python raises several kinds here
            raise ControlError(f"Kafka at {self._where} did not describe {binding.name}: {exc}") from None
        if getattr(error, "errno", 0):
            raise ControlError(f"Kafka at {self._where} refused to describe {binding.name}: {error}")
        return any(_same_acl(a, acl) for a in found)

    def _create_acl(self, binding: AclBinding) -> None:
        try:
            result = self._admin.create_acls([self._acl(binding)])
        except Exception as exc:  # kafka-python raises several kinds here
            raise ControlError(f"Kafka at {self._where} did not create {binding.name}: {exc}") from None
        if result.get("failed"):
            error = result["failed"][0]  # kafka-python gives the error class alone
            raise ControlError(f"Kafka at {self._where} refused to create {binding.name}: {error}")

    def _delete_acl(self, binding: AclBinding) -> None:
        from kafka.admin import ACLFilter

        acl = self._acl(binding)
        exact = ACLFilter(acl.principal, acl.host, acl.operation, acl.permission_type, acl.resource_pattern)
        try:
            results = self._admin.delete_acls([exact])
        except Exception as exc:  # kafka-python raises several kinds here
            raise ControlError(f"Kafka at {self._where} did not delete {binding.name}: {exc}") from None
        for _, _, error in results:
            if getattr(error, "errno", 0):
                raise ControlError(f"Kafka at {self._where} refused to delete {binding.name}: {error}")


def _by_type(components) -> list[tuple[str, str | None]]:
    return sorted(components, key=lambda c: c[0])


def _components(key: QuotaKey | ClientQuotaKey) -> list[tuple[str, str | None]]:
    return key.components if isinstance(key, ClientQuotaKey) else [(key.entity_type, key.entity)]


def _same_acl(a, b) -> bool:
    return (
        a.principal == b.principal
        and a.host == b.host
        and a.operation == b.operation
        and a.permission_type == b.permission_type
        and a.resource_pattern.resource_type == b.resource_pattern.resource_type
        and a.resource_pattern.resource_name == b.resource_pattern.resource_name
        and a.resource_pattern.pattern_type == b.resource_pattern.pattern_type
    )


def _check(result, what: str) -> None:
    code = getattr(result, "error_code", 0)
    if code:
        from kafka.errors import for_code

        message = getattr(result, "error_message", None) or for_code(code).__name__
        raise ControlError(f"Kafka refused to {what}: {message} (error {code})")
