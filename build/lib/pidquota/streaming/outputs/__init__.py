"""What a run writes: the ``foreachBatch`` sink (JSON-lines files, Kafka topics, Redis), output
retention, and the one reader of an output folder."""
