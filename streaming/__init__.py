"""Spark glue: the streaming query (session, parse, screen, fold, the stateful operator), its
``sources`` and its ``outputs``.

Quota logic lives in ``quota`` and ``bloom``; nothing here decides anything.
"""
