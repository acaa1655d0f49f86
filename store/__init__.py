"""The one way to each external service. Redis: quotas set like kafka-configs, live reload, and
fenced per-user throttle state (``client``, ``keys``, ``quotas``, ``decisions``, ``sink``).
Kafka: URLs, client options and the producer, consumer and fetch client factories (``kafka``).

Plain Python on redis-py and kafka-python; no Spark. A broker plug-in or proxy needs only
``pidquota.store.decisions.StatusClient``.
"""
