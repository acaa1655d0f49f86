import tempfile

import pytest
from harness.hostile import FAST, NUMBERS, as_bytes, deep, json_values
from hypothesis import given
from hypothesis import strategies as st

from pidquota.conf.errors import ConfigError, InputError, PidquotaError
from pidquota.conf.loader import (
    DEFAULT_PROPERTIES,
    load,
    parse_overrides,
    parse_properties,
    render_properties,
)
from pidquota.conf.settings import SETTINGS
from pidquota.quota import QuotaSettings


def test_defaults_load_and_build_quota_settings():
    cfg = load(environ={})
    qs = QuotaSettings.from_config(cfg)
    assert (qs.window_ms, qs.window_num, qs.layer_count) == (3_600_000, 11, 4)
    assert qs.false_positive_rate == 0.01 and qs.cleanup_interval_ms == 10


def test_shipped_properties_file_is_generated_from_the_registry():
    assert DEFAULT_PROPERTIES.read_text() == render_properties()


def test_every_setting_has_doc_reason_and_a_valid_default():
    from pidquota.conf.loader import coerce

    for s in SETTINGS:
        assert s.doc and s.reason, s.name
        assert coerce(s, s.default, "default") == s.default


def test_precedence_file_env_then_set(tmp_path):
    props = tmp_path / "p.properties"
    props.write_text("producer.id.quota.window.num: 5\n! comment\npidquota.spark.master=local[1]\n")
    cfg = load(props, environ={"PIDQUOTA_PRODUCER_ID_QUOTA_WINDOW_NUM": "6"}, overrides={})
    assert cfg["producer.id.quota.window.num"] == 6
    assert cfg.origins["producer.id.quota.window.num"] == "environment"
    assert cfg["pidquota.spark.master"] == "local[1]"
    cfg = load(props, environ={}, overrides=parse_overrides(["producer.id.quota.window.num=7"]))
    assert cfg["producer.id.quota.window.num"] == 7


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"producer.id.quota.window.nums": "3"},
            r"unknown setting 'producer.id.quota.window.nums'",
        ),
        (
            {"producer.id.quota.window.num": "x"},
            r"producer.id.quota.window.num = 'x' .* not a valid int",
        ),
        (
            {"producer.id.quota.window.num": "0"},
            r"producer.id.quota.window.num = '0' .* out of range; expected >= 1",
        ),
        (
            {"producer.id.quota.cache.false.positive.rate": "0"},
            r"false.positive.rate = '0' .*> 0.0",
        ),
        ({"producer.id.quota.cache.false.positive.rate": "nan"}, r"not a valid float"),
        ({"pidquota.log.level": "LOUD"}, r"pidquota.log.level = 'LOUD' .*one of ERROR"),
        ({"pidquota.spark.driver.memory": "4 GB"}, r"driver.memory = '4 GB' .*not a memory size; .* 4g"),
        ({"pidquota.spark.driver.memory": "4096"}, r"driver.memory = '4096' .*not a memory size"),
        ({"pidquota.spark.driver.memory": "256m"}, r"driver.memory = '256m' .*too small: .* at least 512m"),
    ],
)
def test_bad_values_fail_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load(environ={}, overrides=overrides)


def test_unknown_environment_variable_fails():
    with pytest.raises(ConfigError, match="PIDQUOTA_NOPE"):
        load(environ={"PIDQUOTA_NOPE": "1"})


def test_malformed_properties_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="line 2: expected key=value"):
        parse_properties("a=1\njunk\n", "x.properties")
    assert parse_properties("a = 1 \\\n  2\n", "x") == {"a": "1 2"}
    with pytest.raises(InputError, match="cannot read settings file"):
        load(tmp_path / "missing.properties", environ={})
    with pytest.raises(ConfigError, match="--set expects key=value"):
        parse_overrides(["novalue"])


def test_a_near_miss_key_or_variable_gets_a_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'pidquota.state.buckets'"):
        load(overrides={"pidquota.state.bucket": "8"}, environ={})
    with pytest.raises(ConfigError, match="did you mean PIDQUOTA_STATE_BUCKETS"):
        load(environ={"PIDQUOTA_STATE_BUCKET": "8"})


def test_a_setting_is_given_only_when_the_user_gave_it(tmp_path):
    key = "pidquota.state.store"
    assert not load(environ={}).given(key)  # the shipped file lists the default
    assert load(environ={"PIDQUOTA_STATE_STORE": "rocksdb"}).given(key)  # the default, but said
    assert load(environ={}, overrides={key: "hdfs"}).given(key)
    own = tmp_path / "p.properties"
    own.write_text(f"{key}=rocksdb\n")
    assert load(own, environ={}).given(key)
    replaced = load(environ={}).replace(key, "hdfs", "checkpoint")
    assert replaced[key] == "hdfs" and replaced.origins[key] == "checkpoint"


def test_an_unknown_setting_points_to_a_list_every_install_has():
    import subprocess
    import sys

    with pytest.raises(ConfigError) as err:
        load(overrides={"pidquota.no.such.thing": "1"})
    assert "`python -m pidquota.conf.loader` lists every key" in str(err.value)
    assert "conf/pidquota.properties" not in str(err.value)  # a path in the repository, not the install
    listed = subprocess.run([sys.executable, "-m", "pidquota.conf.loader"], capture_output=True, text=True)
    assert listed.returncode == 0 and "\npidquota.redis.url=" in listed.stdout


def test_a_value_that_is_not_a_choice_is_called_so():
    with pytest.raises(
        ConfigError, match=r"pidquota.actuator = 'yes' .* is not one of the choices; expected one of"
    ):
        load(None, {"pidquota.actuator": "yes"})


# -- hostile settings files (issue 44): a clear error or a config, never another exception ----

_values = (
    st.sampled_from(NUMBERS)
    | deep()
    | st.text(max_size=30)
    | json_values.map(str)
    | st.sampled_from(["\x00", "\\", "\\u12", "x" * 100_000, "true", "-0", " 1 ", "1_000", "１２"])
)
_line = st.tuples(st.sampled_from([s.name for s in SETTINGS]), _values).map(lambda kv: f"{kv[0]}={kv[1]}")


@FAST
@given(st.lists(_line | st.text(max_size=40), max_size=6), st.binary(max_size=8))
def test_no_settings_file_raises_anything_but_a_clear_error(lines, junk):
    with tempfile.NamedTemporaryFile("wb", suffix=".properties") as f:
        f.write(as_bytes("\n".join(lines)) + junk)
        f.flush()
        try:
            load(f.name, environ={})
        except PidquotaError as exc:
            assert str(exc).strip()
