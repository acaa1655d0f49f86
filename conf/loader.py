"""Read settings from the ``.properties`` file, the environment and overrides.

Precedence, lowest first: defaults (``pidquota.conf.settings``), the properties file,
``PIDQUOTA_*`` environment variables, ``--set key=value`` overrides. Every
value is checked here, at start-up; an unknown key, a wrong type or an
out-of-range value raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pidquota.conf import jsontext
from pidquota.conf.errors import ConfigError, InputError
from pidquota.conf.settings import BY_NAME, SETTINGS, Setting


def _conf_dir() -> Path:
    """This package's folder. Imported from a zip (``spark-submit --py-files``), its data
    files are copied out to a temporary folder once, so they can be read as files."""
    here = Path(__file__).resolve().parent
    if here.is_dir():
        return here
    import atexit
    import shutil
    import tempfile
    from importlib.resources import files

    out = Path(tempfile.mkdtemp(prefix="pidquota-conf-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    for item in files(__package__).iterdir():
        if item.name.endswith((".properties", ".json")):
            (out / item.name).write_bytes(item.read_bytes())
    return out


CONF_DIR = _conf_dir()
DEFAULT_PROPERTIES = CONF_DIR / "pidquota.properties"
DEFAULT_QUOTAS = CONF_DIR / "quotas.json"
_ENV_TO_NAME = {s.env_var: s.name for s in SETTINGS}


def parse_properties(text: str, origin: str) -> dict[str, str]:
    """Java/Kafka ``.properties``: ``key=value`` or ``key: value``, ``#``/``!``
    comments, a trailing backslash continues a line."""
    out: dict[str, str] = {}
    pending = ""
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise ConfigError(f"{origin} line {lineno}: expected key=value, got {raw.strip()!r}")
        out[line[:cut].strip()] = line[cut + 1 :].strip()
    if pending:
        out_line = pending
        raise ConfigError(f"{origin}: file ends inside a continued line {out_line!r}")
    return out


def coerce(setting: Setting, raw: Any, origin: str) -> Any:
    """Convert ``raw`` to the setting's type and check its range."""
    shown = "<redacted>" if setting.secret else repr(raw)
    kind = setting.type
    try:
        if kind is int:
            if isinstance(raw, bool):
                raise ValueError
            value = int(raw) if isinstance(raw, int) else int(str(raw).strip())
        elif kind is bool:
            text = str(raw).strip().lower()
            if text not in ("true", "false"):
                raise ValueError
            value = text == "true"
        elif kind is float:
            value = float(raw)
            if not math.isfinite(value):
                raise ValueError
        else:
            value = str(raw).strip()
    except (TypeError, ValueError):
        raise ConfigError(
            f"{setting.name} = {shown} (from {origin}) is not a valid {kind.__name__}; "
            f"expected {setting.range_text()}"
        ) from None
    too_low = setting.min is not None and (
        value <= setting.min if setting.min_exclusive else value < setting.min
    )
    too_high = setting.max is not None and value > setting.max
    bad_choice = setting.choices is not None and value not in setting.choices
    if too_low or too_high or bad_choice:
        what = "is not one of the choices" if bad_choice else "is out of range"
        raise ConfigError(
            f"{setting.name} = {shown} (from {origin}) {what}; expected "
            f"{setting.range_text()} (default {setting.default!r})"
        )
    problem = setting.check(value) if setting.check else None
    if problem:
        # a check that names the value itself ("'X', which is ...") says it once, not twice
        problem = problem.removeprefix(f"{str(value).strip()!r}, ")
        raise ConfigError(f"{setting.name} = {shown} (from {origin}) {problem}")
    return value


def _unknown(name: str, origin: str) -> ConfigError:
    names = [s.name for s in SETTINGS]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.8) or [
        n for n in names if name.split(".")[-1] in n.split(".")
    ]
    hint = f"; did you mean {close[0]!r}?" if close else "; `python -m pidquota.conf.loader` lists every key"
    return ConfigError(f"unknown setting {name!r} (from {origin}){hint}")


@dataclass(frozen=True)
class Config:
    """Validated settings, and where each value came from."""

    values: Mapping[str, Any]
    origins: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        if name not in self.values:
            raise _unknown(name, "code")
        return self.values[name]

    def given(self, name: str) -> bool:
        """True when the user gave this setting (an environment variable, ``--set``, a
        properties file), False when it is the default (the shipped file lists every default)."""
        origin, value = self.origins.get(name, "default"), self[name]
        shipped_default = origin == str(DEFAULT_PROPERTIES) and value == BY_NAME[name].default
        return origin != "default" and not shipped_default

    def replace(self, name: str, value: Any, origin: str) -> Config:
        """This config with one setting changed (``origin`` says why)."""
        self[name]  # an unknown name raises
        return Config({**self.values, name: value}, {**self.origins, name: origin})

    def quotas_path(self) -> Path:
        return Path(self["pidquota.quotas.file"] or DEFAULT_QUOTAS)


def parse_overrides(pairs: list[str] | None) -> dict[str, str]:
    """``["key=value", ...]`` from ``--set``; a pair without ``=`` is an error."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        out[key.strip()] = value
    return out


def load(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Build the validated :class:`Config` (see the module docstring)."""
    values = {s.name: s.default for s in SETTINGS}
    origins = {s.name: "default" for s in SETTINGS}
    layers: list[tuple[str, Mapping[str, Any]]] = []
    file = Path(path) if path else DEFAULT_PROPERTIES
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read settings file {str(file)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"settings file {str(file)!r} is {jsontext.not_utf8(exc)}; save it as UTF-8"
        ) from None
    layers.append((str(file), parse_properties(text, str(file))))
    env = os.environ if environ is None else environ
    from_env = {}
    for var, raw in env.items():
        if var.startswith("PIDQUOTA_"):
            if var not in _ENV_TO_NAME:
                close = difflib.get_close_matches(var, list(_ENV_TO_NAME), n=1, cutoff=0.8)
                if close:
                    raise ConfigError(f"unknown environment variable {var}; did you mean {close[0]}?")
                raise ConfigError(
                    f"unknown environment variable {var}; pidquota settings map to "
                    "PIDQUOTA_<NAME_WITH_UNDERSCORES> without the pidquota. prefix, e.g. "
                    "PIDQUOTA_SPARK_MASTER or PIDQUOTA_PRODUCER_ID_QUOTA_WINDOW_NUM"
                )
            from_env[_ENV_TO_NAME[var]] = raw
    layers.append(("environment", from_env))
    layers.append(("--set", dict(overrides or {})))
    for origin, layer in layers:
        for name, raw in layer.items():
            setting = BY_NAME.get(name)
            if setting is None:
                raise _unknown(name, origin)
            values[name] = coerce(setting, raw, origin)
            origins[name] = origin
    return Config(values, origins)


def render_properties() -> str:
    """The shipped ``pidquota.properties``: every key, its default, why, and what it does."""
    lines = [
        "# pidquota settings. Generated from conf/settings.py (python -m pidquota.conf.loader > "
        "conf/pidquota.properties);",
        "# every key is listed with its default. Override with PIDQUOTA_<KEY> environment",
        "# variables (the key without 'pidquota.', dots as underscores, upper case, e.g.",
        "# PIDQUOTA_SPARK_MASTER) or `pidquota run --set key=value`.",
    ]
    for s in SETTINGS:
        lines += ["", f"# {s.doc}", f"# Default {s.shown_default}: {s.reason}", f"# Range: {s.range_text()}."]
        value = str(s.default).lower() if isinstance(s.default, bool) else s.default
        lines.append(f"{s.name}={value}")
    return "\n".join(lines) + "\n"


def render_markdown() -> str:
    """docs/configuration.md's settings table (between its ``settings`` markers; scripts/regen-docs)."""
    rows = ["| key | default | what it does |", "|---|---|---|"]
    rows += [f"| `{s.name}` | `{s.shown_default}` | {s.doc} |" for s in SETTINGS]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    import sys

    print(render_markdown() if "--markdown" in sys.argv else render_properties(), end="")
