"""Named traffic mixes, and mix files: which principals behave how."""

from __future__ import annotations

from pathlib import Path

from pidquota.conf import jsontext
from pidquota.conf.errors import ConfigError, InputError
from pidquota.traffic.behaviours import BEHAVIOURS, WELL_BEHAVED

# Per behaviour: every parameter it takes, with its default. ``period_ms`` of
# well-behaved producers is derived from --rate unless a mix sets it.
PARAMS: dict[str, dict[str, object]] = {
    "steady": {"producers": 10, "period_ms": None},
    "transactional": {
        "producers": 5,
        "period_ms": None,
        "reinit_ms": 15 * 60_000,
        "retry_p": 0.2,
        "restart_p": 0.2,
    },
    "legacy": {"producers": 5, "period_ms": None},
    "returning": {"producers": 5, "period_ms": None, "active_ms": 20 * 60_000, "idle_ms": None},
    "crash-loop": {"every_ms": 5_000, "period_ms": 1_000},
    "per-error": {"every_ms": 6_000, "period_ms": 500},
    "per-batch": {"every_ms": 2_000},
    "rolling-deploy": {"producers": 10, "period_ms": None, "deploy_ms": 3 * 3_600_000, "stagger_ms": 30_000},
    "autoscale": {
        "producers": 8,
        "period_ms": None,
        "min_life_ms": 10 * 60_000,
        "max_life_ms": 3 * 3_600_000,
    },
}


def _fleet() -> dict[str, dict]:
    """The "fleet" mix: users of every well-behaved kind, of several sizes, and floods."""
    fleet: dict[str, dict] = {}
    for n in (2, 3, 4, 5, 6, 8, 10, 12, 16, 20):
        fleet[f"User:steady-{n}"] = {"behaviour": "steady", "producers": n}
    for n, hours in ((3, 2), (4, 3), (6, 2), (8, 3), (10, 2), (12, 3), (16, 2), (24, 3)):
        deploy = {"producers": n, "deploy_ms": hours * 3_600_000}
        fleet[f"User:deploys-{n}"] = {"behaviour": "rolling-deploy", **deploy}
    for n in (3, 4, 5, 6, 8, 10, 14, 20):
        fleet[f"User:autoscale-{n}"] = {"behaviour": "autoscale", "producers": n}
    for n in (2, 3, 5, 8):
        fleet[f"User:txn-{n}"] = {"behaviour": "transactional", "producers": n}
    fleet["User:returning-3"] = {"behaviour": "returning", "producers": 3}
    fleet["User:returning-6"] = {"behaviour": "returning", "producers": 6}
    fleet["User:legacy-a"] = {"behaviour": "legacy", "producers": 2}
    fleet["User:legacy-b"] = {"behaviour": "legacy", "producers": 4}
    fleet["User:crash-loop"] = {"behaviour": "crash-loop"}
    fleet["User:crash-loop-slow"] = {"behaviour": "crash-loop", "every_ms": 20_000}
    fleet["User:per-batch"] = {"behaviour": "per-batch"}
    fleet["User:per-error"] = {"behaviour": "per-error"}
    return fleet


MIXES: dict[str, dict[str, dict]] = {
    # A cluster with its usual suspects: the four well-behaved kinds and three rogues.
    "default": {
        "User:steady-orders": {"behaviour": "steady", "producers": 40},
        "User:steady-payments": {"behaviour": "steady", "producers": 20},
        "User:txn-ledger": {"behaviour": "transactional", "producers": 10},
        "User:crash-loop": {"behaviour": "crash-loop"},
        "User:per-batch": {"behaviour": "per-batch"},
        "User:per-error": {"behaviour": "per-error"},
        "User:legacy": {"behaviour": "legacy"},
        "User:returning": {"behaviour": "returning"},
    },
    # A fleet of 34 well-behaved users of six kinds and four floods of three shapes, for
    # pidquota recommend: it must tell the floods from the growth (4 hours show a deploy of each).
    "fleet": _fleet(),
    # Only long-lived producers: nobody should ever be throttled.
    "steady": {
        "User:steady-orders": {"behaviour": "steady", "producers": 40},
        "User:steady-payments": {"behaviour": "steady", "producers": 20},
    },
    # A PID flood: a new producer for every batch, 100 batches a second.
    "flood": {
        "User:steady-orders": {"behaviour": "steady", "producers": 20},
        "User:flood": {"behaviour": "per-batch", "every_ms": 10},
    },
}


def load_mix(name_or_path: str) -> dict[str, dict]:
    """A named mix, or a JSON file ``{"User:x": {"behaviour": "steady", ...}}``."""
    if name_or_path in MIXES:
        return validate_mix(MIXES[name_or_path], f"mix {name_or_path!r}")
    path = Path(name_or_path)
    if not path.exists():
        raise InputError(f"--mix {name_or_path!r} is neither a named mix ({', '.join(MIXES)}) nor a file")
    try:
        doc = jsontext.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"mix file {name_or_path!r} is not readable JSON: {exc}") from None
    return validate_mix(doc, f"mix file {name_or_path!r}")


def validate_mix(doc: object, origin: str) -> dict[str, dict]:
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(f"{origin}: expected a non-empty object of principal -> behaviour")
    out = {}
    for principal, spec in doc.items():
        if not isinstance(principal, str) or not principal.startswith("User:") or len(principal) < 6:
            raise ConfigError(f"{origin}: principal {principal!r} must look like 'User:name'")
        if not isinstance(spec, dict) or spec.get("behaviour") not in BEHAVIOURS:
            raise ConfigError(
                f"{origin}: {principal!r} needs a 'behaviour', one of {', '.join(sorted(BEHAVIOURS))}"
            )
        kind = spec["behaviour"]
        params = dict(PARAMS[kind])
        for key, value in spec.items():
            if key == "behaviour":
                continue
            if key not in params:
                raise ConfigError(
                    f"{origin}: {principal!r} ({kind}) has unknown parameter {key!r}; takes {sorted(params)}"
                )
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(
                    f"{origin}: {principal!r} parameter {key!r} must be a number >= 0, got {value!r}"
                )
            if key.endswith("_p") and value > 1:
                raise ConfigError(
                    f"{origin}: {principal!r} parameter {key!r} is a probability, got {value!r}"
                )
            if (key.endswith("_ms") or key == "producers") and (value < 1 or value != int(value)):
                raise ConfigError(
                    f"{origin}: {principal!r} parameter {key!r} must be a whole number >= 1, got {value!r}"
                )
            params[key] = value
        out[principal] = {"behaviour": kind, **params}
    return out


def well_behaved_period_ms(mix: dict[str, dict], rate: float) -> int:
    """Request period of each well-behaved producer so that they send ~``rate`` requests/s together."""
    producers = sum(spec["producers"] for spec in mix.values() if spec["behaviour"] in WELL_BEHAVED)
    return max(1, round(1000 * producers / rate)) if producers else 1000
