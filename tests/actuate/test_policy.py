"""actuate/policy.py: who is acted on, for how long, and the rails (pure, clock-free)."""

import pytest

from pidquota.actuate.policy import NOT_A_USER, Rails, plan

S = 1000
RAILS = Rails(hold_ms=60 * S, cap=2)


def test_the_docstring_example():
    first = plan({"User:a": 5 * S, "User:b": 2 * S}, {}, 0, RAILS)
    assert first.apply == {"User:a": 65 * S, "User:b": 62 * S} and not first.undo
    acted = dict(first.apply)
    later = plan({"User:c": 15 * S}, acted, 10 * S, RAILS)
    assert later.skipped == {"User:c": "capped"} and not later.apply and not later.undo
    assert plan({}, acted, 63 * S, RAILS).undo == ["User:b"]
    assert plan({}, {"User:a": 65 * S}, 66 * S, RAILS).undo == ["User:a"]


def test_a_throttle_that_goes_on_extends_the_action():
    out = plan({"User:a": 100 * S}, {"User:a": 65 * S}, 50 * S, RAILS)
    assert out.extend == {"User:a": 160 * S} and not out.undo and not out.apply


def test_an_action_is_not_shortened_by_a_shorter_throttle():
    out = plan({"User:a": 1 * S}, {"User:a": 65 * S}, 50 * S, RAILS)
    assert not out.extend and not out.undo


def test_the_allow_list_is_never_acted_on_and_what_it_holds_is_undone():
    rails = Rails(hold_ms=60 * S, cap=5, allow=frozenset({"User:admin"}))
    out = plan({"User:admin": 9 * S}, {}, 0, rails)
    assert out.skipped == {"User:admin": "allow-list"} and not out.apply
    assert plan({}, {"User:admin": 99 * S}, 0, rails).undo == ["User:admin"]


def test_a_throttle_long_over_with_its_hold_is_not_applied():
    assert not plan({"User:a": 1 * S}, {}, 100 * S, RAILS).apply


def test_the_cap_takes_the_longest_throttles_first_and_undos_make_room():
    out = plan({"User:a": 5 * S, "User:b": 9 * S, "User:c": 7 * S}, {}, 0, RAILS)
    assert set(out.apply) == {"User:b", "User:c"} and out.skipped == {"User:a": "capped"}
    pending = plan({"User:a": 70 * S}, {"User:b": 62 * S, "User:c": 80 * S}, 63 * S, RAILS)
    assert pending.undo == ["User:b"] and pending.skipped == {"User:a": "capped"}  # b holds its slot...
    freed = plan({"User:a": 70 * S}, {"User:c": 80 * S}, 63 * S, RAILS)  # ...until the actuator let it go
    assert freed.apply == {"User:a": 130 * S}


def test_a_principal_that_is_not_a_user_is_never_sent_to_the_cluster():
    """The log audit names a topic's PIDs Topic:<name> when no owner is known: no quota or ACL
    can name it, so it is skipped with the reason, and takes no room under the cap."""
    out = plan({"Topic:orders": 9 * S, "User:a": 5 * S, "User:b": 4 * S}, {}, 0, RAILS)
    assert out.skipped == {"Topic:orders": NOT_A_USER} and "owner" in NOT_A_USER
    assert set(out.apply) == {"User:a", "User:b"}


# -- principals that must never reach a cluster (issue 45 §5) ---------------------------------


@pytest.mark.parametrize("principal", ["User:*", "User:", "User:  ", "user:admin"])
def test_a_wildcard_an_empty_or_a_miscased_user_is_never_acted_on(principal):
    out = plan({principal: 10_000}, {}, 0, Rails(hold_ms=1000, cap=5))
    assert out.apply == {} and principal in out.skipped


def test_the_cap_is_not_spent_on_a_principal_that_is_skipped():
    out = plan({"User:*": 10_000, "User:": 10_000, "User:a": 10_000}, {}, 0, Rails(hold_ms=1000, cap=1))
    assert list(out.apply) == ["User:a"]


def test_the_allow_list_takes_quoted_and_escaped_ssl_names():
    from pidquota.actuate.runner import rails_of
    from pidquota.conf.loader import load

    text = 'User:admin, "User:CN=broker,OU=kafka,O=org", User:CN=a\\,O=b'
    rails = rails_of(load(overrides={"pidquota.actuator.allow": text}, environ={}))
    assert rails.allow == {"User:admin", "User:CN=broker,OU=kafka,O=org", "User:CN=a,O=b"}
    dn = "User:CN=broker,OU=kafka,O=org"
    assert plan({dn: 10_000}, {}, 0, rails).skipped == {dn: "allow-list"}


@pytest.mark.parametrize(
    "allow, why",
    [
        ("User:*", "wildcard"),
        ("User:a,User:", "has no name"),
        ("user:admin", r"case-sensitive\): write User:admin"),
        ('"User:CN=a,O=b', "unclosed"),
    ],
)
def test_an_allow_list_kafka_would_read_otherwise_is_refused_at_start_up(allow, why):
    from pidquota.conf.errors import ConfigError
    from pidquota.conf.loader import load

    with pytest.raises(ConfigError, match=why):
        load(overrides={"pidquota.actuator.allow": allow}, environ={})


def test_a_fractional_connection_rate_is_refused_at_start_up():
    """Issue 45 §7: the broker refuses a fractional connection_creation_rate (error 42)."""
    from pidquota.conf.errors import ConfigError
    from pidquota.conf.loader import load

    with pytest.raises(ConfigError, match="fractional connection_creation_rate"):
        load(overrides={"pidquota.actuator.connection.rate": "2.5"}, environ={})
    with pytest.raises(ConfigError, match="expected >= 1"):
        load(overrides={"pidquota.actuator.connection.rate": "0.5"}, environ={})
    assert (
        load(overrides={"pidquota.actuator.connection.rate": "3"}, environ={})[
            "pidquota.actuator.connection.rate"
        ]
        == 3
    )


def test_a_relapse_within_its_hold_doubles_the_hold_and_a_quiet_spell_resets_it():
    """Issue 53: with hold.ms=20000 the plug-in's throttle flapped every ~30 s (a throttle that
    works hides the flood that made it, the hold ends, the flood comes back)."""
    from pidquota.actuate.policy import MAX_HOLD_MS, next_hold

    assert next_hold(20 * S, None, 0) == 20 * S
    assert next_hold(20 * S, (20 * S, 100 * S), 110 * S) == 40 * S  # back 10 s after its undo
    assert next_hold(20 * S, (40 * S, 200 * S), 230 * S) == 80 * S
    assert next_hold(20 * S, (40 * S, 200 * S), 250 * S) == 20 * S  # 50 s away: over its 40 s
    assert next_hold(20 * S, (MAX_HOLD_MS, 0), 1) == MAX_HOLD_MS
    assert next_hold(2 * MAX_HOLD_MS, (2 * MAX_HOLD_MS, 0), 1) == 2 * MAX_HOLD_MS  # never below the base
    out = plan({"User:a": 5 * S}, {}, 0, RAILS, holds={"User:a": 120 * S})
    assert out.apply == {"User:a": 125 * S}
    assert plan({}, {"User:a": 125 * S}, 100 * S, RAILS, holds={"User:a": 120 * S}).undo == []
