"""The Kafka source on kafka-python: the driver side (``source``: offsets, partitions) and the
executor side (``fetch``: the read loop; ``connection``: the worker's connection to the leaders;
``records``: record batches decoded straight into Arrow)."""
