import json

import pytest

from pidquota.conf.errors import ConfigError, InputError
from pidquota.quota import DEFAULT_ENTITY, QuotaSource, StaticQuotas, parse_quotas, resolve
from pidquota.quota.resolver import validate_rate


def test_override_then_default_then_unlimited():
    quotas = {"User:alice": 100, DEFAULT_ENTITY: 50}
    assert resolve(quotas, "User:alice") == 100
    assert resolve(quotas, "User:bob") == 50
    assert resolve({"User:alice": 100}, "User:bob") is None


def test_quota_file_round_trip(tmp_path):
    path = tmp_path / "q.json"
    path.write_text(
        json.dumps(
            {
                "users": {
                    "User:a": {"producer_ids_rate": 10},
                    "<default>": {"producer_ids_rate": 2.5},
                }
            }
        )
    )
    assert StaticQuotas.from_file(path).snapshot() == {"User:a": 10, "<default>": 2.5}


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"users": {"User:a": {"producer_ids_rate": -1}}}, r"'User:a'.*positive number, got -1"),
        ({"users": {"User:a": {"producer_ids_rate": 0}}}, r"'User:a'.*got 0"),
        ({"users": {"User:a": {"producer_ids_rate": "lots"}}}, r"'User:a'.*JSON number.*\"lots\""),
        (
            {"users": {"User:alice": {"producer_ids_rate": "50"}}},
            r"producer_ids_rate for 'User:alice' must be a JSON number, got the string \"50\"; "
            r"write 50 without quotes",
        ),
        ({"users": {"<default>": {"producer_ids_rate": "0.5"}}}, r"'<default>'.*write 0.5 without"),
        ({"users": {"User:a": {"producer_ids_rate": None}}}, r"'User:a'.*got None"),
        ({"users": {"User:a": {"producer_ids_rate": [5]}}}, r"'User:a'.*got \[5\]"),
        ({"users": {"User:a": {"producer_ids_rate": float("nan")}}}, r"'User:a'.*got nan"),
        ({"users": {"User:a": {"producer_ids_rate": True}}}, r"'User:a'.*got True"),
        (
            {"users": {"User:a": {"producer_byte_rate": 5}}},
            r"unknown config key.*producer_byte_rate",
        ),
        ({"clients": {}}, r"unknown key\(s\) \['clients'\]"),
        ({"users": {"": {"producer_ids_rate": 5}}}, r"non-empty"),
    ],
)
def test_bad_quota_documents_name_the_problem(doc, message):
    with pytest.raises(ConfigError, match=message):
        parse_quotas(doc)


def test_missing_and_unparseable_files(tmp_path):
    with pytest.raises(InputError, match="cannot read quota file"):
        StaticQuotas.from_file(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        StaticQuotas.from_file(bad)


def test_quota_file_refuses_a_quoted_number_naming_the_user(tmp_path):
    path = tmp_path / "q.json"
    path.write_text('{"users": {"User:alice": {"producer_ids_rate": "50"}}}')
    with pytest.raises(ConfigError, match=r"'User:alice'.*the string \"50\"; write 50 without quotes"):
        StaticQuotas.from_file(path)


def test_rates_below_one_and_fractional_rates_are_accepted_from_the_file():
    doc = {"users": {"User:a": {"producer_ids_rate": 0.5}, "User:b": {"producer_ids_rate": 1e-3}}}
    assert parse_quotas(doc) == {"User:a": 0.5, "User:b": 0.001}


def test_text_from_redis_and_the_cli_is_still_accepted():
    # Redis hashes and `configs --add-config` hand over text
    assert validate_rate("User:a", "50") == 50
    assert validate_rate("User:a", b"2.5".decode()) == 2.5
    with pytest.raises(ConfigError, match="'User:a'.*got 'lots'"):
        validate_rate("User:a", "lots")


def test_static_quotas_are_never_stale():
    source: QuotaSource = StaticQuotas({"User:a": 1})
    assert source.stale is False
    assert "stale" in QuotaSource.__annotations__


def test_a_quota_too_small_to_express_a_throttle_time_is_refused():
    from pidquota.quota.resolver import MIN_RATE, validate_rate

    assert validate_rate("User:a", MIN_RATE) == MIN_RATE
    with pytest.raises(ConfigError, match=r"'User:a' is 1e-20, below the smallest quota 1e-06"):
        validate_rate("User:a", 1e-20)


def test_a_bare_name_in_the_quota_file_is_the_user_kafka_configs_would_name():
    """Issue 53: ``{"users": {"crash-loop": ...}}`` (kafka-configs' --entity-name, no ``User:``)
    was taken silently, and the run throttled no one."""
    doc = {"users": {"crash-loop": {"producer_ids_rate": 60}, "<default>": {"producer_ids_rate": 200}}}
    assert parse_quotas(doc) == {"User:crash-loop": 60, "<default>": 200}
    assert resolve(parse_quotas(doc), "User:crash-loop") == 60
    with pytest.raises(ConfigError, match=r"'alice' and 'User:alice' both name User:alice; keep one"):
        parse_quotas({"users": {"alice": {"producer_ids_rate": 1}, "User:alice": {"producer_ids_rate": 2}}})
    with pytest.raises(
        ConfigError, match=r"quota file: user entity name 'Group:ops' names a 'Group' principal"
    ):
        parse_quotas({"users": {"Group:ops": {"producer_ids_rate": 1}}})
