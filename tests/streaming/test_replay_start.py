"""Which replay time a run uses (``streaming/replay.py``) and how the CLI applies it; no Spark."""

from __future__ import annotations

import json

import pytest

from pidquota.cli.checkpoints import Source, recorded_replay, write_marker
from pidquota.cli.main import main
from pidquota.conf.errors import ConfigError, PidquotaError
from pidquota.quota import QuotaSettings
from pidquota.streaming.replay import replay_start_ms, replay_until

NOW = 1_767_225_600_000


@pytest.mark.parametrize(
    "value, recorded, progress, expected",
    [
        ("", None, False, None),
        ("", 5, True, 5),  # a restart without the flag keeps the checkpoint's replay
        ("now", None, False, NOW),
        ("now", 5, True, 5),  # a restarted --rebuild: no newer events replayed
        ("now", None, True, None),  # state is there already: nothing to rebuild
        ("1767225000000", 5, True, 1_767_225_000_000),  # an explicit time, as given
    ],
)
def test_the_replay_time_in_force(value, recorded, progress, expected):
    assert replay_until(value, recorded, progress, NOW)[0] == expected


def test_a_bad_replay_time_names_the_key():
    with pytest.raises(ConfigError, match=r"pidquota.replay.until \(--replay-until\) .* got 'yesterday'"):
        replay_until("yesterday", None, False, NOW)


@pytest.mark.parametrize(
    "value, says",
    [
        ("1767225600", "looks like seconds: --replay-until 1767225600000"),
        ("5", "not between 2000-01-01 and a day from now"),
        (str(NOW + 2 * 86_400_000), "not between 2000-01-01 and a day from now"),
        ("99999999999999999999999", "not between"),
    ],
)
def test_a_replay_time_out_of_range_is_refused_with_the_likely_slip(value, says):
    with pytest.raises(ConfigError, match="milliseconds") as err:
        replay_until(value, None, False, NOW)
    assert says in str(err.value)


def test_the_replay_starts_w_plus_w_over_layers_before():
    assert (
        replay_start_ms(12 * 3_600_000, QuotaSettings(window_ms=3_600_000, layer_count=4))
        == 10.75 * 3_600_000
    )


def test_the_marker_records_the_replay_time(tmp_path):
    write_marker(str(tmp_path), Source.of(None), 64, "rocksdb", NOW)
    assert json.loads((tmp_path / "pidquota-source.json").read_text())["replay_until_ms"] == NOW
    assert recorded_replay(str(tmp_path)) == NOW
    write_marker(str(tmp_path), Source.of(None), 64, "rocksdb")
    assert recorded_replay(str(tmp_path)) is None
    assert recorded_replay("s3a://bucket/ck") is None


@pytest.fixture
def started(monkeypatch):
    """The config a run would start Spark with (it stops there)."""
    seen = []

    def refuse(config, master=None):
        seen.append(config)
        raise PidquotaError("Spark would start here")

    monkeypatch.setattr("pidquota.streaming.session.spark_session", refuse)
    return seen


def test_rebuild_on_a_new_kafka_checkpoint_starts_a_window_and_a_layer_back(kafka, tmp_path, started):
    kafka.produce("rebuild-start", ["{}"], partitions=1)
    url = f"kafka://{kafka.bootstrap}/rebuild-start"
    assert main(["run", "--input", url, "--output", str(tmp_path / "out"), "--rebuild"]) == 2
    (config,) = started
    start = int(config["pidquota.kafka.starting.offsets"])
    import time

    assert abs(time.time() * 1000 - 4_500_000 - start) < 60_000  # now - (1 h + 15 min)
    started.clear()
    given = ["--starting-offsets", "earliest"]
    assert main(["run", "--input", url, "--output", str(tmp_path / "o2"), "--rebuild", *given]) == 2
    assert started[0]["pidquota.kafka.starting.offsets"] == "earliest"  # what the user asked for wins


def test_rebuild_on_a_checkpoint_with_state_says_so(tmp_path, started, capsys):
    (tmp_path / "e.jsonl").write_text("{}\n")
    ckpt = tmp_path / "out" / "_checkpoint"
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "offsets" / "0").write_text("v1\n{}\n")
    write_marker(str(ckpt), Source.of(str(tmp_path / "e.jsonl")), 64, "rocksdb")
    run = ["run", "--input", str(tmp_path / "e.jsonl"), "--output", str(tmp_path / "out"), "--once"]
    assert main([*run, "--rebuild"]) == 2
    assert (
        "the checkpoint already holds state, so --rebuild has nothing to rebuild" in capsys.readouterr().err
    )


def test_rebuild_needs_a_checkpoint_it_can_record_in(tmp_path, capsys, no_spark):
    args = ["run", "--checkpoint", "s3a://b/ck", "--rebuild", "--output", str(tmp_path / "o")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--rebuild (--replay-until now) records its time in the checkpoint" in err
    assert "--replay-until EPOCH_MS" in err


def test_rebuild_and_replay_until_are_one_or_the_other(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--rebuild", "--replay-until", "5"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
