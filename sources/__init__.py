"""pidquota's own Spark streaming sources (Python data sources): JSON-lines files, the demo's
generator, Kafka. Each screens its own lines in its format (``pidquota.formats``)."""
