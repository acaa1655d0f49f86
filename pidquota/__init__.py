"""pidquota: cluster-wide producer-ID quotas (KIP-936) for Apache Kafka, as a Spark Structured
Streaming job.

One import root; its subpackages are the repository's top-level folders (pyproject.toml's
``package-dir``), in layers that import only downward:

* ``pidquota.conf``: settings, the loader, the one exception root;
* ``pidquota.bloom``: the layered, timestamped Bloom filter;
* ``pidquota.quota``: the contract: token bucket, samples, quota resolution, the enforcer;
* ``pidquota.store`` (Redis and Kafka: the one way to each), ``pidquota.actuate`` (Kafka's
  controls) and ``pidquota.traffic`` (the generator);
* ``pidquota.formats``: what an input's records mean, one module per format;
* ``pidquota.sources``: where they come from: files, followed files, Kafka topics, the demo;
* ``pidquota.streaming``: the Spark query and its ``outputs``;
* ``pidquota.observe`` (metrics, table, report) and ``pidquota.recommend``;
* ``pidquota.cli``: the command line, one module per command.
"""
