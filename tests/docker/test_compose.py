"""No Docker engine here: check that docker/compose.yaml agrees with the code.

Each check returns the problems it finds. The tests run every check on the file
(no problems) and on copies broken the way a careless edit would break them (the
problem is named), so no check passes by finding nothing to look at.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import tomllib
import yaml

from pidquota.cli.main import parser as _parser
from pidquota.cli.run_plan import run_overrides as _run_overrides
from pidquota.conf.errors import PidquotaError
from pidquota.conf.loader import load
from pidquota.conf.settings import SETTINGS
from pidquota.quota.resolver import QUOTA_KEY
from pidquota.store.kafka import KafkaUrl

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The README and the pages under docs/: wherever the stack's command lines are documented.
DOCS = "\n".join(path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
PIDQUOTA_IMAGE = f"{PYPROJECT['project']['name']}:{PYPROJECT['project']['version']}"
SETTING_ENV = {s.env_var: s.name for s in SETTINGS}
REDIS_PORT = 6379
OUTPUT_TOPICS = ("decisions", "metrics", "dead.letters")


def compose() -> dict:
    doc = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(doc, dict) and isinstance(doc.get("services"), dict), "compose.yaml has no services"
    return doc


# -- reading the file -------------------------------------------------------------------


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if value is None else str(value) for key, value in env.items()}


def argv(value) -> list[str]:
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def depends_on(service: dict) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (how or {}).get("condition", "service_started") for name, how in deps.items()}


def runs_pidquota(service: dict) -> bool:
    """The pidquota image with its own entrypoint (``pidquota``): ``command`` is pidquota's argv."""
    return service.get("image") == PIDQUOTA_IMAGE and "entrypoint" not in service


def pidquota_commands(doc: dict) -> dict[str, list[str]]:
    return {name: argv(s.get("command")) for name, s in doc["services"].items() if runs_pidquota(s)}


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """``pidquota``'s subcommands, from the CLI's own parser."""
    action = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def parse(args: list[str]) -> tuple[argparse.Namespace | None, list[str]]:
    """``pidquota ARGS`` as the CLI parses it. Flags are checked exactly: argparse would take
    an abbreviation (``--quota-stor``) that a reader of the file would not recognise."""
    subs = subcommands()
    if not args or args[0] not in subs:
        return None, [f"{args[:1]} is not a pidquota command (one of {', '.join(subs)})"]
    known = {flag for action in subs[args[0]]._actions for flag in action.option_strings}
    problems = [
        f"pidquota {args[0]} has no {token.split('=', 1)[0]}"
        for token in args[1:]
        if token.startswith("--") and token.split("=", 1)[0] not in known
    ]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return _parser().parse_args(args), problems
    except SystemExit:
        return None, [*problems, f"pidquota {' '.join(args)}: {err.getvalue().strip().splitlines()[-1]}"]


def parsed(doc: dict) -> dict[str, argparse.Namespace]:
    out = {}
    for name, args in pidquota_commands(doc).items():
        namespace, _ = parse(args)
        if namespace is not None:
            out[name] = namespace
    return out


def run_config(doc: dict, name: str, args: argparse.Namespace):
    """The settings ``pidquota run`` would start with: flags, then the service's PIDQUOTA_*."""
    env = {k: v for k, v in environment(doc["services"][name]).items() if k.startswith("PIDQUOTA_")}
    return load(args.config, _run_overrides(args), environ=env)


def shell_lines(service: dict) -> list[list[str]]:
    """A shell service's command lines, split into words (``entrypoint: [sh, -c]``)."""
    text = "\n".join(argv(service.get("entrypoint")) + [str(c) for c in service.get("command") or []])
    return [shlex.split(line, comments=True) for line in text.replace("\\\n", " ").splitlines()]


def after(words: list[str], flag: str) -> list[str]:
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w == flag]


def created_topics(doc: dict) -> dict[str, str]:
    """Topic -> the service whose kafka-topics.sh --create makes it."""
    out = {}
    for name, service in doc["services"].items():
        for words in shell_lines(service):
            if words and words[0].endswith("kafka-topics.sh") and "--create" in words:
                out.update(dict.fromkeys(after(words, "--topic"), name))
    return out


def kafka_urls(doc: dict) -> dict[str, list[str]]:
    """Service -> every kafka:// URL its pidquota command uses (input, --to, output topics)."""
    out: dict[str, list[str]] = {}
    for name, args in parsed(doc).items():
        urls = [u for u in (getattr(args, "input", None), getattr(args, "to", None)) if u]
        if args.command == "run":
            with contextlib.suppress(PidquotaError):  # a bad setting is environment_problems'
                config = run_config(doc, name, args)
                urls += [config[f"pidquota.kafka.{t}.topic"] for t in OUTPUT_TOPICS]
        out[name] = [u for u in urls if u.startswith("kafka://")]
    return out


def redis_urls(doc: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, args in parsed(doc).items():
        urls = [getattr(args, "quota_store", None), getattr(args, "redis", None)]
        urls.append(environment(doc["services"][name]).get("PIDQUOTA_REDIS_URL"))
        out[name] = [u for u in urls if u]
    return out


def listeners(spec: str) -> dict[str, tuple[str, int]]:
    """``NAME://HOST:PORT,...`` -> {NAME: (HOST, PORT)}."""
    out = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        m = re.fullmatch(r"([A-Za-z0-9_]+)://([^:,]*):(\d+)", item)
        assert m, f"cannot read listener {item!r}"
        out[m.group(1)] = (m.group(2), int(m.group(3)))
    return out


def kafka_addresses(doc: dict) -> dict[str, str]:
    """HOST:PORT -> Kafka service, for every advertised listener reachable from the other
    containers: its host is the service and the broker listens on that port under that name."""
    out = {}
    for name, service in doc["services"].items():
        env = environment(service)
        if "KAFKA_ADVERTISED_LISTENERS" not in env:
            continue
        bound = listeners(env.get("KAFKA_LISTENERS", ""))
        for listener, (host, port) in listeners(env["KAFKA_ADVERTISED_LISTENERS"]).items():
            if host in (name, service.get("hostname")) and bound.get(listener, (None, None))[1] == port:
                out[f"{host}:{port}"] = name
    return out


def redis_addresses(doc: dict) -> dict[tuple[str, int], str]:
    out = {}
    for name, service in doc["services"].items():
        if str(service.get("image", "")).startswith("redis:"):
            port = after(argv(service.get("command")), "--port")
            out[(name, int(port[0]) if port else REDIS_PORT)] = name
    return out


def closure(doc: dict, name: str) -> set[str]:
    seen: set[str] = set()
    todo = list(depends_on(doc["services"][name]))
    while todo:
        dep = todo.pop()
        if dep not in seen and dep in doc["services"]:
            seen.add(dep)
            todo += list(depends_on(doc["services"][dep]))
    return seen


# -- the checks -------------------------------------------------------------------------


def image_problems(doc: dict) -> list[str]:
    problems = []
    for name, service in doc["services"].items():
        image = service.get("image")
        if not image:
            problems.append(f"{name}: no image (a built service names its tag too)")
            continue
        last = image.rsplit("/", 1)[-1]
        tag = last.split(":", 1)[1] if ":" in last else None
        if tag is None or tag == "latest" or not re.match(r"v?\d+\.\d+\.\d+", tag):
            problems.append(f"{name}: image {image} is not pinned to an exact version (NAME:X.Y.Z...)")
        if "build" in service and image != PIDQUOTA_IMAGE:
            problems.append(f"{name}: builds pidquota but tags it {image}, not {PIDQUOTA_IMAGE}")
    return problems


def environment_problems(doc: dict) -> list[str]:
    problems = []
    for name, service in doc["services"].items():
        env = {k: v for k, v in environment(service).items() if k.startswith("PIDQUOTA_")}
        problems += [
            f"{name}: {var} is no setting in conf/settings.py" for var in env if var not in SETTING_ENV
        ]
        try:
            load(environ=env)
        except PidquotaError as exc:
            problems.append(f"{name}: {exc}")
    return problems


def command_problems(doc: dict) -> list[str]:
    problems = []
    commands = pidquota_commands(doc)
    if not any(args[:1] == ["run"] for args in commands.values()):
        problems.append("no service runs `pidquota run`")
    for name, args in commands.items():
        namespace, found = parse(args)
        problems += [f"{name}: {p}" for p in found]
        for pair in (getattr(namespace, "add_config", None) or "").split(","):
            if pair and pair.partition("=")[0] != QUOTA_KEY:
                problems.append(f"{name}: --add-config {pair}: the only quota is {QUOTA_KEY}")
    return problems


def topic_problems(doc: dict) -> list[str]:
    """Every topic a service uses is created; what the clients produce is read: by the
    enforcer from the topic, or from the broker's request log (:func:`request_log_problems`)."""
    problems = []
    created = created_topics(doc)
    runs = {name: a for name, a in parsed(doc).items() if a.command == "run"}
    if not runs:
        problems.append("no service runs the enforcer")
    reads = {
        name: KafkaUrl.parse(a.input).topic
        for name, a in runs.items()
        if (a.input or "").startswith("kafka://")
    }
    for name, args in runs.items():
        try:
            config = run_config(doc, name, args)
        except PidquotaError as exc:  # a bad setting: named by environment_problems too
            problems.append(f"{name}: {exc}")
            continue
        topics = [reads.get(name)] + [config[f"pidquota.kafka.{t}.topic"] for t in OUTPUT_TOPICS]
        for topic in filter(None, topics):
            topic = KafkaUrl.parse(topic).topic if topic.startswith("kafka://") else topic
            if topic not in created:
                problems.append(f"{name} uses topic {topic!r}, which no service creates ({sorted(created)})")
    for name, args in parsed(doc).items():
        if args.command in ("generate", "clients") and args.to:
            topic = KafkaUrl.parse(args.to).topic
            if topic not in created:
                problems.append(f"{name} produces to {topic!r}, which no service creates ({sorted(created)})")
            elif args.command == "generate" and topic not in reads.values():
                problems.append(f"{name} produces to {topic!r}; the enforcer reads {sorted(reads.values())}")
    return problems


def address_problems(doc: dict) -> list[str]:
    """Every kafka:// and redis:// address a service uses is a service of this file, on the
    port it listens and advertises, and the user depends on it (directly or not)."""
    problems = []
    kafka = kafka_addresses(doc)
    redis = redis_addresses(doc)
    for name, urls in kafka_urls(doc).items():
        for url in urls:
            for broker in KafkaUrl.parse(url).bootstrap.split(","):
                if broker not in kafka:
                    problems.append(f"{name}: {url} is not an advertised listener here ({sorted(kafka)})")
                elif kafka[broker] not in closure(doc, name):
                    problems.append(f"{name} uses {kafka[broker]} but does not depend on it")
    for name, service in doc["services"].items():
        for words in shell_lines(service):
            for broker in after(words, "--bootstrap-server"):
                if broker not in kafka:
                    problems.append(
                        f"{name}: --bootstrap-server {broker} is not advertised ({sorted(kafka)})"
                    )
    for name, urls in redis_urls(doc).items():
        for url in urls:
            parts = urlsplit(url)
            where = (parts.hostname, parts.port or REDIS_PORT)
            if parts.scheme not in ("redis", "rediss") or where not in redis:
                problems.append(f"{name}: {url} is not the redis service ({sorted(redis)})")
            elif redis[where] not in closure(doc, name):
                problems.append(f"{name} uses {redis[where]} but does not depend on it")
    return problems


def dependency_problems(doc: dict) -> list[str]:
    """A health condition needs a healthcheck; the enforcer starts after the one-shots that
    create its topics and set its quotas have finished."""
    problems = []
    services = doc["services"]
    for name, service in services.items():
        for dep, condition in depends_on(service).items():
            if dep not in services:
                problems.append(f"{name} depends on {dep}, which is no service")
            elif condition == "service_healthy" and "healthcheck" not in services[dep]:
                problems.append(f"{name} waits for {dep} to be healthy, but {dep} has no healthcheck")
    setup = set(created_topics(doc).values())
    setup |= {name for name, a in parsed(doc).items() if a.command == "configs" and a.alter}
    for name, args in parsed(doc).items():
        if args.command == "run":
            for one_shot in sorted(setup):
                if depends_on(services[name]).get(one_shot) != "service_completed_successfully":
                    problems.append(f"{name} must wait for {one_shot}: service_completed_successfully")
    return problems


def build_problems(doc: dict) -> list[str]:
    problems = []
    for name, service in doc["services"].items():
        build = service.get("build")
        if build is None:
            continue
        build = {"context": build} if isinstance(build, str) else build
        context = (COMPOSE_FILE.parent / build.get("context", ".")).resolve()
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        if context != ROOT:
            problems.append(f"{name}: build context {context} is not the repository root")
        if not dockerfile.is_file() or dockerfile.resolve() != DOCKERFILE:
            problems.append(f"{name}: dockerfile {dockerfile} is not docker/Dockerfile")
    return problems


def volume_problems(doc: dict) -> list[str]:
    problems = []
    declared = set(doc.get("volumes") or {})
    for name, service in doc["services"].items():
        mounts = {}
        for volume in service.get("volumes") or []:
            source, _, target = str(volume).partition(":")
            target = target.split(":")[0]
            mounts[target] = source
            if not source.startswith((".", "/", "~")) and source not in declared:
                problems.append(f"{name}: volume {source} is not declared under volumes:")
            elif source.startswith(".") and not (COMPOSE_FILE.parent / source).exists():
                problems.append(
                    f"{name}: bind mount {source} is no file of docker/ (paths are relative to it)"
                )
        args = parsed(doc).get(name)
        if args is not None and args.command == "run":
            out = Path(args.output)
            if not out.is_absolute() or not any(out.is_relative_to(t) for t in mounts):
                problems.append(f"{name}: --output {args.output} is on no volume ({sorted(mounts)})")
    return problems


def request_appender(path: Path) -> tuple[str | None, str | None, str | None]:
    """A log4j2 YAML file's ``kafka.request.logger``: (its level, its appender's pattern, its
    appender's file), with ``${name}`` properties of the file resolved."""
    doc = yaml.safe_load(path.read_text())["Configuration"]
    props = {p["name"]: p["value"] for p in (doc.get("Properties") or {}).get("Property", [])}

    def resolved(text):
        return re.sub(r"\$\{([^:}]+)\}", lambda m: props.get(m.group(1), m.group(0)), text or "")

    logger = next(
        (x for x in doc["Loggers"].get("Logger", []) if x.get("name") == "kafka.request.logger"), {}
    )
    ref = (logger.get("AppenderRef") or {}).get("ref")
    appender = next((a for a in doc["Appenders"].get("RollingFile", []) if a.get("name") == ref), {})
    pattern = resolved((appender.get("PatternLayout") or {}).get("pattern"))
    return logger.get("level"), pattern or None, appender.get("fileName")


def mounts(service: dict) -> dict[str, str]:
    """Target -> source of a service's volumes (named volumes and bind mounts)."""
    out = {}
    for volume in service.get("volumes") or []:
        source, _, target = str(volume).partition(":")
        out[target.split(":")[0]] = source
    return out


def request_log_problems(doc: dict) -> list[str]:
    """The broker writes its request log at DEBUG, in the pattern pidquota reads, to a named
    volume, and the enforcer follows that volume (under its --input) in that format."""
    services = doc["services"]
    kafka = services.get("kafka", {})
    env = environment(kafka)
    target = re.search(r"-Dlog4j2\.configurationFile=(\S+)", env.get("KAFKA_LOG4J_OPTS", ""))
    config = mounts(kafka).get(target.group(1)) if target else None
    if config is None or not (COMPOSE_FILE.parent / config).is_file():
        return ["kafka: no log4j2.yaml of docker/ mounted where KAFKA_LOG4J_OPTS names it"]
    level, pattern, file_name = request_appender(COMPOSE_FILE.parent / config)
    problems = []
    if level != "DEBUG" or not file_name:
        problems.append("kafka: kafka.request.logger is not at DEBUG with an appender of its own")
    if pattern != "[%d] %p %m (%c)%n":
        problems.append("kafka: the request appender's pattern is not Kafka's [%d] %p %m (%c)%n")
    folder = env.get("LOG_DIR", "/opt/kafka/logs") if "${sys:kafka.logs.dir}" in (file_name or "") else ""
    folder = folder or str(Path(file_name or "/").parent)
    volume = mounts(kafka).get(folder)
    if volume is None or volume not in (doc.get("volumes") or {}):
        return [*problems, f"kafka: the request log's folder {folder} is on no named volume"]
    for name, args in parsed(doc).items():
        if args.command != "run" or (args.input or "").startswith("kafka://"):
            continue
        where = [t for t, src in mounts(services[name]).items() if src == volume]
        if not any(Path(t).is_relative_to(args.input) for t in where):
            problems.append(f"{name}: --input {args.input} does not hold the {volume} volume ({where})")
        config = run_config(doc, name, args)
        if (
            config["pidquota.input.format"] != "kafka-request-log"
            or config["pidquota.input.follow"] == "false"
        ):
            problems.append(f"{name}: reads {args.input} without --input-format kafka-request-log, followed")
    return problems


def sasl_users(service: dict) -> dict[str, str]:
    """The PLAIN users (name -> password) of a broker's listener JAAS settings."""
    out = {}
    for key, value in environment(service).items():
        if key.endswith("_PLAIN_SASL_JAAS_CONFIG"):
            out.update(re.findall(r'user_([^=\s]+)="([^"]*)"', value))
    return out


def client_problems(doc: dict) -> list[str]:
    """Each client logs in as a user the broker knows, on a SASL listener."""
    problems = []
    services = doc["services"]
    users = sasl_users(services.get("kafka", {}))
    protocols = dict(
        item.split(":", 1)
        for item in environment(services.get("kafka", {}))
        .get("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "")
        .split(",")
        if ":" in item
    )
    advertised = listeners(environment(services.get("kafka", {})).get("KAFKA_ADVERTISED_LISTENERS", ""))
    by_address = {f"{h}:{p}": name for name, (h, p) in advertised.items()}
    for name, args in parsed(doc).items():
        if args.command != "clients":
            continue
        env = environment(services[name])
        user = env.get("PIDQUOTA_KAFKA_SASL_USERNAME")
        if users.get(user) != env.get("PIDQUOTA_KAFKA_SASL_PASSWORD"):
            problems.append(f"{name}: user {user!r} and its password are not the broker's ({sorted(users)})")
        listener = by_address.get(KafkaUrl.parse(args.to).bootstrap)
        protocol = env.get("PIDQUOTA_KAFKA_SECURITY_PROTOCOL")
        if protocols.get(listener) != protocol or not (protocol or "").startswith("SASL_"):
            problems.append(
                f"{name}: {args.to} is listener {listener} ({protocols.get(listener)}), not {protocol}"
            )
    return problems


CHECKS = [
    image_problems,
    environment_problems,
    command_problems,
    topic_problems,
    address_problems,
    dependency_problems,
    build_problems,
    volume_problems,
    request_log_problems,
    client_problems,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_compose_file_agrees_with_the_code(check):
    assert check(compose()) == []


def test_the_stack_is_the_one_the_readme_describes():
    doc = compose()
    assert {
        "kafka",
        "topics",
        "redis",
        "quotas",
        "crash-loop",
        "steady",
        "enforcer",
        "prometheus",
        "grafana",
    } <= set(doc["services"])
    commands = {name: args[0] for name, args in pidquota_commands(doc).items()}
    assert commands == {"quotas": "configs", "crash-loop": "clients", "steady": "clients", "enforcer": "run"}


# -- every check can fail ---------------------------------------------------------------


def replace_arg(service: str, old: str, new: str) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        command = doc["services"][service]["command"]
        assert old in command, (service, old)
        command[command.index(old)] = new

    return edit


def set_key(service: str, path: str, value) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        *parents, last = path.split(".")
        node = doc["services"][service]
        for key in parents:
            node = node[key]
        if value is None:
            del node[last]
        else:
            node[last] = value

    return edit


def edit_shell(service: str, old: str, new: str) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        command = doc["services"][service]["command"]
        assert old in command[0]
        command[0] = command[0].replace(old, new)

    return edit


BREAKAGES = [
    (image_problems, set_key("redis", "image", "redis:latest"), "not pinned"),
    (image_problems, set_key("kafka", "image", "apache/kafka"), "not pinned"),
    (image_problems, set_key("redis", "image", "redis:7-alpine"), "not pinned"),
    (image_problems, set_key("grafana", "image", "grafana/grafana:11"), "not pinned"),
    (image_problems, set_key("prometheus", "image", "prom/prometheus:latest"), "not pinned"),
    (environment_problems, set_key("enforcer", "environment.PIDQUOTA_SPARK_MASTR", "local[2]"), "no setting"),
    (
        environment_problems,
        set_key("enforcer", "environment.PIDQUOTA_LOG_LEVEL", "LOUD"),
        "is not one of the choices",
    ),
    (command_problems, replace_arg("enforcer", "--quota-store", "--quota-stor"), "has no --quota-stor"),
    (command_problems, replace_arg("enforcer", "--output", "--out-dir"), "has no --out-dir"),
    (
        command_problems,
        replace_arg("quotas", "--entity-default", "--entity-defaults"),
        "no --entity-defaults",
    ),
    (command_problems, replace_arg("crash-loop", "clients", "produce"), "not a pidquota command"),
    (command_problems, replace_arg("quotas", "producer_ids_rate=200", "producer_id_rate=200"), "only quota"),
    (
        topic_problems,
        replace_arg("enforcer", "kafka://kafka:9092/pidquota-decisions", "kafka://kafka:9092/decisions"),
        "no service creates",
    ),
    (
        topic_problems,
        replace_arg("enforcer", "kafka://kafka:9092/pidquota-metrics", "kafka://kafka:9092/pidquota-metric"),
        "no service creates",
    ),
    (
        topic_problems,
        replace_arg("steady", "kafka://kafka:9094/pidquota-traffic", "kafka://kafka:9094/traffic"),
        "no service creates",
    ),
    (
        topic_problems,
        edit_shell("topics", "--topic pidquota-traffic", "--topic pidquota-trafic"),
        "no service creates",
    ),
    (
        address_problems,
        replace_arg("enforcer", "kafka://kafka:9092/pidquota-metrics", "kafka://kafka:9093/pidquota-metrics"),
        "not an advertised listener",
    ),
    (
        address_problems,
        replace_arg(
            "enforcer", "kafka://kafka:9092/pidquota-metrics", "kafka://localhost:19092/pidquota-metrics"
        ),
        "not an advertised listener",
    ),
    (
        address_problems,
        replace_arg(
            "crash-loop", "kafka://kafka:9094/pidquota-traffic", "kafka://broker:9094/pidquota-traffic"
        ),
        "not an advertised listener",
    ),
    (
        address_problems,
        edit_shell(
            "topics",
            "--bootstrap-server kafka:9092 --create --if-not-exists --topic pidquota-traffic",
            "--bootstrap-server localhost:9092 --create --if-not-exists --topic pidquota-traffic",
        ),
        "not advertised",
    ),
    (
        address_problems,
        replace_arg("enforcer", "redis://redis:6379/0", "redis://redis:6380/0"),
        "not the redis service",
    ),
    (
        address_problems,
        replace_arg("quotas", "redis://redis:6379/0", "redis://localhost:6379/0"),
        "not the redis service",
    ),
    (
        address_problems,
        set_key("steady", "depends_on", {"redis": {"condition": "service_healthy"}}),
        "does not depend on it",
    ),
    (dependency_problems, set_key("enforcer", "depends_on.topics", None), "must wait for topics"),
    (
        dependency_problems,
        set_key("enforcer", "depends_on.quotas", {"condition": "service_started"}),
        "must wait for quotas",
    ),
    (dependency_problems, set_key("redis", "healthcheck", None), "has no healthcheck"),
    (
        build_problems,
        set_key("enforcer", "build", {"context": ".", "dockerfile": "docker/Dockerfile"}),
        "not the repository root",
    ),
    (
        build_problems,
        set_key("enforcer", "build", {"context": "..", "dockerfile": "Dockerfile"}),
        "is not docker/Dockerfile",
    ),
    (image_problems, set_key("enforcer", "image", "pidquota:9.9.9"), "not pidquota:"),
    (volume_problems, replace_arg("enforcer", "/data/out", "/out"), "on no volume"),
    (
        request_log_problems,
        replace_arg("enforcer", "/logs", "/var/log"),
        "does not hold the kafka-request-log",
    ),
    (request_log_problems, replace_arg("enforcer", "kafka-request-log", "events"), "without --input-format"),
    (
        request_log_problems,
        set_key("enforcer", "volumes", ["pidquota-data:/data", "kafka-data:/logs/kafka:ro"]),
        "does not hold the kafka-request-log",
    ),
    (
        request_log_problems,
        set_key(
            "kafka",
            "volumes",
            ["kafka-data:/var/lib/kafka/data", "kafka-request-log:/var/log/kafka-requests"],
        ),
        "no log4j2.yaml",
    ),
    (request_log_problems, set_key("kafka", "environment.LOG_DIR", "/opt/kafka/logs"), "on no named volume"),
    (request_log_problems, set_key("kafka", "environment.KAFKA_LOG4J_OPTS", "-Xmx1g"), "no log4j2.yaml"),
    (client_problems, set_key("steady", "environment.PIDQUOTA_KAFKA_SASL_PASSWORD", "x"), "not the broker's"),
    (
        client_problems,
        set_key("crash-loop", "environment.PIDQUOTA_KAFKA_SASL_USERNAME", "crash"),
        "not the broker's",
    ),
    (
        client_problems,
        replace_arg(
            "crash-loop", "kafka://kafka:9094/pidquota-traffic", "kafka://kafka:9092/pidquota-traffic"
        ),
        "listener PLAINTEXT",
    ),
    (volume_problems, set_key("enforcer", "volumes", ["pidquota-dat:/data"]), "not declared"),
    (
        volume_problems,
        set_key(
            "prometheus", "volumes", ["./docker/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml"]
        ),
        "no file of docker/",
    ),
]


@pytest.mark.parametrize(
    ("check", "edit", "expected"), BREAKAGES, ids=[f"{c.__name__}:{m}" for c, _, m in BREAKAGES]
)
def test_each_check_names_a_broken_copy(check, edit, expected):
    doc = copy.deepcopy(compose())
    edit(doc)
    problems = check(doc)
    assert any(expected in p for p in problems), problems


def test_every_check_is_exercised_by_a_breakage():
    assert {c.__name__ for c, _, _ in BREAKAGES} == {c.__name__ for c in CHECKS}


# -- the README and docs/ -----------------------------------------------------------------


def readme_compose_commands() -> list[list[str]]:
    """Every `docker compose` command line of README.md and docs/*.md."""
    text = DOCS.replace("\\\n", " ")
    return [
        shlex.split(line.strip(), comments=True)
        for line in text.splitlines()
        if line.strip().startswith("docker compose")
    ]


def test_readme_compose_commands_name_this_file_its_services_and_real_flags():
    doc = compose()
    commands = readme_compose_commands()
    assert any(words[words.index("-f") + 1 :][:2] == ["docker/compose.yaml", "up"] for words in commands)
    for words in commands:
        assert words[2:4] == ["-f", "docker/compose.yaml"], words
        verb, rest = words[4], words[5:]
        while rest and rest[0].startswith("-"):  # run --rm, logs -f: options before the service
            rest = rest[1:]
        if verb in ("run", "exec", "logs"):
            service = rest[0]
            assert service in doc["services"], words
            if verb == "run" and runs_pidquota(doc["services"][service]):
                assert parse(rest[1:])[1] == [], words
