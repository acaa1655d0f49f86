"""The Kafka source on kafka-python: the driver side (``source``: offsets, partitions) and the
executor side (``fetch``: Fetch requests decoded straight into Arrow)."""
