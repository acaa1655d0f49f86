"""The producer-ID quota contract (KIP-936). Pure Python, Spark-free, clock-free."""

from pidquota.quota.bucket import TokenBucket
from pidquota.quota.decision import ADMIT, THROTTLE, Decision, Decisions
from pidquota.quota.enforcer import PrincipalQuota, QuotaSettings
from pidquota.quota.resolver import DEFAULT_ENTITY, QuotaSource, StaticQuotas, parse_quotas, resolve
from pidquota.quota.samples import SampledStats

__all__ = [
    "ADMIT",
    "DEFAULT_ENTITY",
    "THROTTLE",
    "Decision",
    "Decisions",
    "PrincipalQuota",
    "QuotaSettings",
    "QuotaSource",
    "SampledStats",
    "StaticQuotas",
    "TokenBucket",
    "parse_quotas",
    "resolve",
]
