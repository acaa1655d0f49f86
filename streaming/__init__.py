"""Spark glue: the streaming query (session, the fold before the shuffle, the stateful
operator) over what ``pidquota.sources`` read and ``pidquota.formats`` screened, and its
``outputs``.

Quota logic lives in ``quota`` and ``bloom``; nothing here decides anything.
"""
