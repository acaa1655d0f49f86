"""Faults only a real broker shows, on Apache Kafka: wrong SASL credentials are one clear error
at start-up, and a topic deleted under a running read is data loss that names it (or is
skipped, with failOnDataLoss false), never a hang or a stack trace."""

from __future__ import annotations

import time

import pytest
from harness.kafka import read_rows, reader

from pidquota.store.kafka import KafkaError, check_topic


def test_wrong_sasl_credentials_are_one_clear_error_without_the_password(kafka):
    kafka.produce("sasl-checked", ["x"], partitions=1)
    check_topic(kafka.sasl("alice"), "sasl-checked", 10_000)  # the right ones pass
    wrong = {**kafka.sasl("alice"), "kafka.sasl.password": "not-alices-secret"}
    t0 = time.monotonic()
    with pytest.raises(KafkaError) as failed:
        check_topic(wrong, "sasl-checked", 10_000)
    message = str(failed.value)
    assert time.monotonic() - t0 < 30
    assert kafka.sasl_bootstrap in message and "refused the PLAIN login of user 'alice'" in message, message
    # kafka-python reads the broker's reason, or only its close, whichever comes first
    assert ("Invalid username or password" in message or "wrong user or password" in message) and (
        "PIDQUOTA_KAFKA_SASL_PASSWORD" in message
    ), message
    assert "not-alices-secret" not in message and "\n" not in message


def test_a_sasl_listener_reached_without_its_settings_says_which_settings(kafka):
    """Issue 53: `pidquota actuator status --bootstrap HOST:SASLPORT` said "no broker answered...
    is it up" when it needed the SASL settings."""
    with pytest.raises(KafkaError) as failed:  # as the CLI gives it: the setting's default, PLAINTEXT
        check_topic(
            {"kafka.bootstrap.servers": kafka.sasl_bootstrap, "kafka.security.protocol": "PLAINTEXT"},
            "anything",
            5_000,
        )
    message = str(failed.value)
    assert "closed each connection pidquota opened without authentication" in message, message
    assert "pidquota.kafka.security.protocol" in message and "\n" not in message
    with pytest.raises(KafkaError, match="no broker answered"):  # nothing there: not that
        check_topic({"kafka.bootstrap.servers": "127.0.0.1:1"}, "anything", 2_000)


def _delete(kafka, topic: str) -> None:
    admin = kafka.admin()
    try:
        admin.delete_topics([topic])
        for _ in range(100):  # until the metadata no longer has it
            if topic not in admin.list_topics():
                return
            time.sleep(0.1)
    finally:
        admin.close()
    raise AssertionError(f"{topic} was not deleted")


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_topic_deleted_mid_run_is_data_loss_that_names_it(kafka, fail_on_data_loss):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    topic = f"doomed-{fail_on_data_loss}"
    kafka.produce(topic, [f"r{i}" for i in range(10)], partitions=1)
    rd = reader(kafka, topic, failOnDataLoss=fail_on_data_loss, fetchTimeoutMs="10000")
    try:
        start = rd.initialOffset()
        end = rd.latestOffset(start, ReadAllAvailable())  # planned: offsets 0..9
        _delete(kafka, topic)
        if fail_on_data_loss == "true":
            # deleted, or (when a client that still tracked it asked the broker to create it
            # again) recreated empty: either way the planned offsets are lost, and named
            lost = rf"{topic}-0 no longer exists|{topic}-0 offsets 0..9 are past the log end 0"
            with pytest.raises(KafkaError, match=lost):
                read_rows(rd, topic, start[topic], end[topic])
        else:
            assert read_rows(rd, topic, start[topic], end[topic]) == []  # skipped, with a warning
    finally:
        rd.stop()


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_topic_recreated_empty_mid_run_is_data_loss_that_names_it(kafka, fail_on_data_loss):
    """Issue 43 §3, the fourth cause: a deleted topic created again (empty) fetches nothing,
    without an error; the read named a broker that is down after its timeout."""
    from harness.kafka import create
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    topic = f"reborn-{fail_on_data_loss}"
    kafka.produce(topic, [f"r{i}" for i in range(10)], partitions=1)
    rd = reader(kafka, topic, failOnDataLoss=fail_on_data_loss, fetchTimeoutMs="30000")
    try:
        start = rd.initialOffset()
        end = rd.latestOffset(start, ReadAllAvailable())  # planned: offsets 0..9
        _delete(kafka, topic)
        for _ in range(100):
            try:
                create(kafka, topic)
                break
            except Exception:  # the deletion may still be under way on the broker
                time.sleep(0.1)
        t0 = time.monotonic()
        if fail_on_data_loss == "true":
            with pytest.raises(KafkaError, match=rf"{topic}-0 offsets 0..9 are past the log end 0"):
                read_rows(rd, topic, start[topic], end[topic])
        else:
            assert read_rows(rd, topic, start[topic], end[topic]) == []  # skipped, with a warning
        assert time.monotonic() - t0 < 25, "named at the next metadata look, not at the timeout"
    finally:
        rd.stop()
