"""Redis: quotas set like kafka-configs, live reload, and fenced per-user throttle state.

Plain Python on redis-py; no Spark. A broker plug-in or proxy needs only
``pidquota.store.decisions.StatusClient``.
"""
