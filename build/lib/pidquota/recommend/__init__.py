"""``pidquota recommend``: quotas suggested from observed traffic, in one place: the rules
(``rules``, pure Python), the reference statistics and output (``stats``, pandas) and the
Spark job (``job``)."""
