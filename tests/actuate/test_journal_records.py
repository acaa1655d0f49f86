"""The journal's reader trusts nothing it did not write (issues 44 and 45 §4): a record that is
not JSON, null, has another field, a control pidquota never sets (another quota key, another
user's, an ALLOW, a wildcard) or a value of the wrong type is skipped with a warning; the
others load as before."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from types import SimpleNamespace

import pytest
from harness.hostile import FAST, NUMBERS, as_bytes, deep, json_values
from hypothesis import given
from hypothesis import strategies as st

from pidquota.actuate.controls import AclBinding, ClientQuotaKey, QuotaKey
from pidquota.actuate.journal import SET, Entry, Journal, _key

QUOTA = QuotaKey("user", "crash", "request_percentage")
GOOD = Entry(QUOTA, "User:crash", 200.0, 1.0, 1_800_000_000_000, SET)


def _record(key, value, offset=0):
    return SimpleNamespace(key=key, value=value, offset=offset)


def _load(*records) -> dict:
    out: dict = {}
    journal = Journal({}, "pidquota-actions")
    for r in records:
        journal._read(r, out)
    return out


def _body(**change) -> bytes:
    body = json.loads(GOOD.to_json())
    body.update(change)
    return json.dumps(body).encode()


def test_pidquota_s_own_records_load():
    acl = Entry(AclBinding("User:crash", "WRITE", "DENY", "TOPIC", "*"), "User:crash", False, True, 5, SET)
    ip = Entry(QuotaKey("ip", "fe80::1%eth-0", "connection_creation_rate"), "User:crash", None, 1.0, 5)
    client = Entry(ClientQuotaKey("crash", "loop", "request_percentage"), "User:crash", 50.0, 0.1, 5)
    default = Entry(ClientQuotaKey("crash", None, "request_percentage"), "User:crash", None, 0.1, 5)
    out = _load(*(_record(_key(e.control), e.to_json()) for e in (GOOD, acl, ip, client, default)))
    assert out == {e.control: e for e in (GOOD, acl, ip, client, default)}
    assert _load(_record(_key(QUOTA), GOOD.to_json()), _record(_key(QUOTA), None)) == {}  # a tombstone


CRAFTED = {
    "not JSON": b"hello",
    "null": b"null",
    "an extra field": _body(extra=1),
    "a missing field": json.dumps(
        {k: v for k, v in json.loads(GOOD.to_json()).items() if k != "state"}
    ).encode(),
    "until_ms a string": _body(until_ms="soon"),
    "another quota key": _body(
        control={**json.loads(GOOD.to_json())["control"], "key": "producer_byte_rate"}
    ),
    "another user's quota": _body(control={**json.loads(GOOD.to_json())["control"], "entity": "bob"}),
    "an ALLOW": _body(
        control={
            "kind": "acl",
            **json.loads(json.dumps(AclBinding("User:crash", "ALL", "ALLOW", "TOPIC", "*").__dict__)),
        },
        before=False,
        ours=True,
    ),
    "User:*": _body(principal="User:*", control={**json.loads(GOOD.to_json())["control"], "entity": "*"}),
    "an empty user": _body(
        principal="User:", control={**json.loads(GOOD.to_json())["control"], "entity": ""}
    ),
    "a boolean quota": _body(ours=True),
    "another user's client quota": _body(
        control={"kind": "client-quota", "user": "bob", "client_id": "loop", "key": "request_percentage"}
    ),
    "a client quota's other key": _body(
        control={"kind": "client-quota", "user": "crash", "client_id": None, "key": "producer_byte_rate"}
    ),
    "a client throttle without a client id": _body(
        control={"kind": "client-throttle", "principal": "User:crash", "client_id": None},
        before=False,
        ours=True,
    ),
    "a client quota without a user": _body(
        control={"kind": "client-quota", "user": None, "client_id": "loop", "key": "request_percentage"}
    ),
    "NaN": GOOD.to_json().replace(b"200.0", b"NaN"),
    "an unknown state": _body(state="done"),
}


@pytest.mark.parametrize("why", sorted(CRAFTED))
def test_a_record_pidquota_did_not_write_is_skipped_with_a_warning(why, caplog):
    """Written over pidquota's own record of the same control: the control stays pidquota's."""
    with caplog.at_level(logging.WARNING, "pidquota.actuate"):
        out = _load(_record(_key(QUOTA), GOOD.to_json()), _record(_key(QUOTA), CRAFTED[why], offset=7))
    assert out == {GOOD.control: GOOD}
    assert "offset 7 skipped, not applied" in caplog.text


def test_a_key_that_does_not_match_its_value_is_skipped(caplog):
    with caplog.at_level(logging.WARNING, "pidquota.actuate"):
        assert _load(_record(_key(QuotaKey("user", "bob", "request_percentage")), GOOD.to_json())) == {}
    assert "its key names" in caplog.text


@FAST
@given(
    st.none()
    | deep().map(as_bytes)
    | st.binary(max_size=60)
    | json_values.map(lambda v: json.dumps(v).encode()),
    st.none()
    | deep().map(as_bytes)
    | st.binary(max_size=60)
    | st.sampled_from(list(CRAFTED.values()))
    | st.sampled_from(NUMBERS).map(
        lambda n: _body(until_ms=0).replace(b'"until_ms": 0', b'"until_ms": ' + n.encode())
    )
    | json_values.map(lambda v: _body(before=v)),
)
def test_no_record_makes_the_reader_raise(key, value):
    _load(_record(key, value))


def test_a_record_its_reader_would_skip_is_never_written():
    """Review of issue 45: a control set and journalled under a record the reader skips would
    never be undone (an IP entity that is a host name, a wildcard principal)."""
    from pidquota.actuate.journal import JournalError
    from pidquota.actuate.mechanisms import quota_and_connections

    host = QuotaKey("ip", "client.example.com", "connection_creation_rate")
    for entry in (
        Entry(host, "User:crash", None, 2.0, 1_800_000_000_000, SET),
        Entry(QuotaKey("user", "*", "request_percentage"), "User:*", None, 1.0, 1_800_000_000_000, SET),
    ):
        with pytest.raises(JournalError, match="is not a control pidquota sets"):
            Journal({}, "j").write(entry)  # refused before any connection is made
    controls = quota_and_connections(1.0, 2).controls("User:crash", ("client.example.com", "10.0.0.5"))
    assert [c.entity for c, _ in controls] == ["crash", "10.0.0.5"]


def test_a_wildcard_record_of_an_earlier_version_is_skipped_with_what_to_do(caplog):
    body = json.loads(GOOD.to_json())
    acl = {"kind": "acl", **asdict(AclBinding("User:*", "WRITE", "DENY", "TOPIC", "*"))}
    body.update(control=acl, principal="User:*", before=False, ours=True)
    with caplog.at_level(logging.WARNING, logger="pidquota.actuate"):
        assert _load(_record(json.dumps(acl).encode(), json.dumps(body).encode(), 7)) == {}
    assert "offset 7 skipped" in caplog.text and "undo it by hand" in caplog.text


def test_a_principal_the_run_does_not_log_in_as_is_named_with_both_fixes():
    """Tried as a new user (issue 54): the README's command named User:pidquota on a PLAINTEXT
    listener, where the run is User:ANONYMOUS, and the ACLs of pidquota's topics then let in a
    principal the run is not. Named for PLAINTEXT and SASL PLAIN or SCRAM logins; nothing said
    when they agree, when none is set, or when the login is not known from the options (TLS,
    GSSAPI, no username)."""
    from pidquota.actuate.journal import login_mismatch

    said = login_mismatch("User:pidquota", {"kafka.bootstrap.servers": "b:9092"})
    assert said.startswith(
        "pidquota.actuator.principal is User:pidquota, but this run connects as User:ANONYMOUS"
    )
    assert "Log in as User:pidquota (pidquota.kafka.security.protocol" in said
    assert said.endswith("or set pidquota.actuator.principal=User:ANONYMOUS") and "\n" not in said
    sasl = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512"}
    said = login_mismatch("User:pidquota", {**sasl, "kafka.sasl.username": "alice"})
    assert "connects as User:alice (its SASL SCRAM-SHA-512 login)" in said
    plain = {"kafka.security.protocol": "sasl_plaintext", "kafka.sasl.mechanism": "plain"}
    said = login_mismatch("User:ANONYMOUS", {**plain, "kafka.sasl.username": "bob"})
    assert "connects as User:bob" in said and "Connect through a PLAINTEXT listener" in said
    for principal, options in (
        ("User:ANONYMOUS", {"kafka.security.protocol": "PLAINTEXT"}),
        ("User:pidquota", {**sasl, "kafka.sasl.username": "pidquota"}),
        ("", {}),
        (None, {"kafka.security.protocol": None}),
        ("User:pidquota", {"kafka.security.protocol": "SSL"}),
        ("User:pidquota", {**sasl, "kafka.sasl.username": None}),
        ("User:pidquota", {**sasl, "kafka.sasl.mechanism": "GSSAPI", "kafka.sasl.username": "x"}),
    ):
        assert login_mismatch(principal, options) is None, (principal, options)


def test_a_sasl_login_left_in_a_plaintext_runs_settings_names_no_one():
    """From the review: own_principal named User:q for a PLAINTEXT run with a SASL username
    left in its settings, and pidquota's topics got ACLs for a principal the run is not."""
    from pidquota.actuate.journal import own_principal

    login = {"kafka.sasl.mechanism": "PLAIN", "kafka.sasl.username": "q"}
    assert own_principal({**login, "kafka.security.protocol": "PLAINTEXT"}) == ""
    assert own_principal(login) == ""  # no protocol: Kafka's default, PLAINTEXT
    assert own_principal({**login, "kafka.security.protocol": "SASL_SSL"}) == "User:q"
