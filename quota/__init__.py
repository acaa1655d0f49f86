"""The producer-ID quota contract (KIP-936). Pure Python, Spark-free, clock-free."""

from quota.bucket import TokenBucket
from quota.enforcer import ADMIT, THROTTLE, Decision, PrincipalQuota, QuotaSettings
from quota.resolver import DEFAULT_ENTITY, QuotaSource, StaticQuotas, parse_quotas, resolve
from quota.samples import SampledStats

__all__ = [
    "ADMIT",
    "DEFAULT_ENTITY",
    "THROTTLE",
    "Decision",
    "PrincipalQuota",
    "QuotaSettings",
    "QuotaSource",
    "SampledStats",
    "StaticQuotas",
    "TokenBucket",
    "parse_quotas",
    "resolve",
]
