import json

import pytest

from conf.errors import ConfigError, InputError
from quota import DEFAULT_ENTITY, StaticQuotas, parse_quotas, resolve


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
        ({"users": {"User:a": {"producer_ids_rate": "lots"}}}, r"'User:a'.*got 'lots'"),
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
