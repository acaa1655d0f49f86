"""store/kafka.py: the one way to Kafka's clients, and what every one of them is made with."""


def test_pidquota_s_consumers_never_create_a_topic(monkeypatch):
    """Issue 43 §3: kafka-python asks the broker to create an unknown topic by default, so a
    reader's background metadata refresh brought a deleted input topic back, empty."""
    import kafka

    from pidquota.store import kafka as kafka_store

    made = {}
    monkeypatch.setattr(kafka, "KafkaConsumer", lambda **kwargs: made.update(kwargs) or "consumer")
    assert kafka_store.consumer({"kafka.bootstrap.servers": "b:9092"}) == "consumer"
    assert made["allow_auto_create_topics"] is False
