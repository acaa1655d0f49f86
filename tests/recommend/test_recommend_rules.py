"""The suggestion rules of ``pidquota recommend``, the --what-if syntax and user entity names."""

import math
import random
from fractions import Fraction

import pytest

from pidquota.conf.errors import ConfigError
from pidquota.quota.resolver import user_entity
from pidquota.recommend.rules import covered, parse_what_if, suggest_default, suggest_rate


@pytest.mark.parametrize(
    "p99, headroom, expected",
    [
        (7.4, 2, 15),  # ceil(14.8), the docstring's example
        (10, 2.0, 20),  # a whole product is not rounded up
        (50, 1.1, 55),  # in decimal: 55, not ceil(55.00000000000001) = 56
        (100, 1.1, 110),
        (10, 0.7, 7),
        (0.2, 2, 1),  # at least 1
        (0, 2, 1),
        (1.5, 0.5, 1),
        (99.01, 1, 100),
    ],
)
def test_suggest_rate_is_ceil_of_p99_times_headroom_at_least_one(p99, headroom, expected):
    assert suggest_rate(p99, headroom) == expected


@pytest.mark.parametrize("headroom", [0, -1, math.inf, math.nan, True, "2"])
def test_suggest_rate_refuses_a_bad_headroom(headroom):
    with pytest.raises(ConfigError, match="headroom must be a number > 0"):
        suggest_rate(3, headroom)


@pytest.mark.parametrize("p99", [-0.5, math.inf, math.nan])
def test_suggest_rate_refuses_a_bad_p99(p99):
    with pytest.raises(ValueError, match="p99 must be a finite count"):
        suggest_rate(p99, 2)


def test_suggest_default_worked_example():
    peaks = [1, 2, 3, 4, 5, 6, 7, 8, 9, 40]
    assert suggest_default(peaks, 2, 0.9) == 18
    assert covered(peaks, 18) == 9
    assert suggest_default(peaks, 2, 1.0) == 80
    assert suggest_default(peaks, 2, 0.1) == 2
    assert suggest_default(peaks, 1, 0.5) == 5


def test_suggest_default_shares_are_taken_in_decimal():
    # 0.55 x 100 is 55.00000000000001 in binary floating point; ceil would make k = 56
    assert suggest_default(list(range(1, 101)), 1, 0.55) == 55
    assert suggest_default([50, 50, 80], 1.1, 0.6) == 55  # 50 x 1.1 = 55 exactly


def test_suggest_default_is_at_least_one():
    assert suggest_default([0, 0, 0.2], 2, 1.0) == 1


def _smallest_covering(peaks, headroom, share):
    """The rule restated: the smallest whole R >= 1 with #{peak x headroom <= R} >= share x n."""
    h, need = Fraction(repr(float(headroom))), Fraction(repr(float(share))) * len(peaks)
    r = 1
    while sum(1 for p in peaks if Fraction(repr(float(p))) * h <= r) < need:
        r += 1
    return r


def test_suggest_default_is_the_smallest_quota_that_covers_the_share():
    rng = random.Random(11)
    for _ in range(300):
        n = rng.randint(1, 30)
        peaks = [rng.choice([rng.randint(0, 50), rng.randint(0, 500) / 10]) for _ in range(n)]
        headroom = rng.choice([1, 1.1, 1.5, 2, 2.5, 3, 0.5])
        share = rng.choice([0.1, 0.5, 0.7, 0.9, 0.95, 0.99, 1.0, rng.randint(1, 100) / 100])
        rate = suggest_default(peaks, headroom, share)
        assert rate == _smallest_covering(peaks, headroom, share), (peaks, headroom, share)
        if headroom >= 1:  # then the covered users have peak <= rate
            assert covered(peaks, rate) >= share * n


@pytest.mark.parametrize(
    "args, error, message",
    [
        (([], 2, 0.9), ValueError, "no users"),
        (([1, -2], 2, 0.9), ValueError, "peaks must be finite counts >= 0"),
        (([1], 2, 0), ConfigError, r"share of users must be in \(0, 1\], got 0"),
        (([1], 2, 1.5), ConfigError, r"got 1.5"),
        (([1], 0, 0.9), ConfigError, "headroom must be a number > 0"),
    ],
)
def test_suggest_default_refuses_bad_arguments(args, error, message):
    with pytest.raises(error, match=message):
        suggest_default(*args)


@pytest.mark.parametrize(
    "name, entity",
    [
        ("<default>", "<default>"),
        ("User:alice", "User:alice"),
        ("alice", "User:alice"),
        ("CN=host,OU=x:y", "User:CN=host,OU=x:y"),
        ("User:Group:x", "User:Group:x"),
        ("User:a:b", "User:a:b"),
        ("default", "User:default"),
    ],
)
def test_user_entity_names(name, entity):
    assert user_entity(name) == entity


@pytest.mark.parametrize(
    "name, message",
    [
        ("", "is empty; give User:NAME, a bare NAME or <default>"),
        ("  ", "is empty"),
        ("User:", "has no user after 'User:'; write e.g. User:alice"),
        ("User: ", "has no user after 'User:'"),
        ("User:<default>", "the default entity is written <default>"),
        (
            "Group:x",
            "names a 'Group' principal, and quotas are per user; if 'Group:x' is the user's name, write User:Group:x",
        ),
        ("user:alice", "names a 'user' principal.*write User:user:alice"),
        ("Client-Id:c", "names a 'Client-Id' principal"),
    ],
)
def test_user_entity_refusals_name_the_fix(name, message):
    with pytest.raises(ConfigError, match=message):
        user_entity(name)


def test_parse_what_if():
    assert parse_what_if("User:alice=50,<default>=100") == {"User:alice": 50, "<default>": 100}
    assert parse_what_if(" bob = 2.5 , User:carol=1e3 ") == {"User:bob": 2.5, "User:carol": 1000}
    assert parse_what_if("User:CN=a=7") == {"User:CN=a": 7}  # the last '=' separates
    assert parse_what_if("x=0.5") == {"User:x": 0.5}


@pytest.mark.parametrize(
    "text, message",
    [
        ("", r"--what-if is empty; give quotas such as 'User:alice=50,<default>=100'"),
        ("User:alice", r"--what-if: 'User:alice' is not NAME=RATE"),
        ("User:a=1,", r"--what-if: '' is not NAME=RATE"),
        ("=5", r"--what-if: user entity name '' is empty"),
        ("Group:x=5", r"--what-if: user entity name 'Group:x' names a 'Group' principal"),
        ("User:a=0", r"--what-if: producer_ids_rate for 'User:a' must be a positive number, got '0'"),
        ("User:a=lots", r"producer_ids_rate for 'User:a' must be a positive number, got 'lots'"),
        ("User:a=1e-9", r"below the smallest quota"),
        ("alice=1,User:alice=2", r"--what-if gives 'User:alice' twice; give each user once"),
    ],
)
def test_parse_what_if_errors_name_the_part_and_the_fix(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_what_if(text)
