"""No Grafana, no Prometheus server: check the metrics half of the compose stack.

What is checked: the enforcer serves metrics and prometheus.yml scrapes it there; Grafana's
provisioning mounts are the files of docker/grafana/; the datasource is the prometheus
service; the dashboard's panels use that datasource, only the exporter's metric names
(tests/harness/dashboard.py) and only variables a test can substitute; promtool parses
every expression and the Prometheus config.

Same shape as test_compose.py: each check returns the problems it finds. The tests run every
check on the files (no problems) and on copies broken the way a careless edit would break
them (the problem is named), so no check passes by finding nothing to look at.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from harness.dashboard import (
    DASHBOARD,
    METRIC_NAMES,
    PER_USER_METRICS,
    dashboard_queries,
    metric_names,
    panel_queries,
    panels,
    substitute,
)
from harness.dashboard import load as load_dashboard
from test_compose import (
    COMPOSE_FILE,
    argv,
    compose,
    depends_on,
    environment,
    image_problems,
    parsed,
    run_config,
)

from pidquota.conf.errors import PidquotaError

DOCKER = COMPOSE_FILE.parent
DATASOURCES = DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
PROVIDERS = DOCKER / "grafana" / "provisioning" / "dashboards" / "pidquota.yaml"
PROMETHEUS_YML = DOCKER / "prometheus" / "prometheus.yml"
DATASOURCE_UID = "pidquota-prometheus"
GRAFANA_PROVISIONING = "/etc/grafana/provisioning"  # where the grafana image reads provisioning
PROMETHEUS_CONFIG = "/etc/prometheus/prometheus.yml"  # prom/prometheus's default --config.file
PROMETHEUS_PORT = 9090  # prom/prometheus's default --web.listen-address
SCRAPE_JOB = "pidquota"
GRID_COLUMNS = 24
IMAGES = {"prometheus": "prom/prometheus", "grafana": "grafana/grafana"}


def stack() -> dict:
    """Every file of the metrics stack, parsed; the checks read only this."""
    return {
        "compose": compose(),
        "datasources": yaml.safe_load(DATASOURCES.read_text()),
        "providers": yaml.safe_load(PROVIDERS.read_text()),
        "prometheus": yaml.safe_load(PROMETHEUS_YML.read_text()),
        "dashboard": load_dashboard(DASHBOARD),
    }


# -- reading the files ------------------------------------------------------------------


def service(s: dict, kind: str) -> tuple[str | None, dict]:
    """The compose service running ``kind``'s image (prometheus, grafana), or (None, {})."""
    for name, svc in s["compose"]["services"].items():
        if str(svc.get("image", "")).partition(":")[0] == IMAGES[kind]:
            return name, svc
    return None, {}


def mounts(svc: dict) -> dict[str, Path]:
    """Container path -> host path of the service's bind mounts (relative to compose.yaml)."""
    out = {}
    for volume in svc.get("volumes") or []:
        source, _, target = str(volume).partition(":")
        if source.startswith((".", "/")):
            out[target.split(":")[0]] = (DOCKER / source).resolve()
    return out


def host_path(svc: dict, container_path: str) -> Path | None:
    """Where ``container_path`` comes from on the host, when a bind mount holds it."""
    path = Path(container_path)
    for target, source in mounts(svc).items():
        if path.is_relative_to(target):
            return source / path.relative_to(target)
    return None


def flag(svc: dict, name: str, default: str) -> str:
    """``--name=VALUE`` (or ``--name VALUE``) of a service's command, else the image default."""
    words = argv(svc.get("command"))
    for i, word in enumerate(words):
        if word.startswith(f"{name}="):
            return word.split("=", 1)[1]
        if word == name and i + 1 < len(words):
            return words[i + 1]
    return default


def enforcer(s: dict) -> tuple[str | None, object]:
    """The service that runs ``pidquota run``, and the settings it starts with."""
    for name, args in parsed(s["compose"]).items():
        if args.command == "run":
            return name, run_config(s["compose"], name, args)
    return None, None


def scrape_job(s: dict) -> dict:
    jobs = [j for j in s["prometheus"].get("scrape_configs") or [] if j.get("job_name") == SCRAPE_JOB]
    return jobs[0] if jobs else {}


def scrape_targets(job: dict) -> list[str]:
    return [t for c in job.get("static_configs") or [] for t in c.get("targets") or []]


def uid_of(ref) -> str | None:
    return ref.get("uid") if isinstance(ref, dict) else ref


def prometheus_datasources(s: dict) -> list[dict]:
    return [d for d in s["datasources"].get("datasources") or [] if d.get("type") == "prometheus"]


# -- the checks -------------------------------------------------------------------------


def service_problems(s: dict) -> list[str]:
    problems = []
    for kind in IMAGES:
        name, svc = service(s, kind)
        if name is None:
            problems.append(f"no {kind} service (image {IMAGES[kind]}:X.Y.Z)")
            continue
        problems += image_problems({"services": {name: svc}})
    grafana, svc = service(s, "grafana")
    prometheus, _ = service(s, "prometheus")
    if grafana and prometheus and prometheus not in depends_on(svc):
        problems.append(f"{grafana} reads from {prometheus} but does not depend on it")
    return problems


def provisioning_problems(s: dict) -> list[str]:
    """The provisioning Grafana reads is docker/grafana/provisioning, and its dashboard
    provider's folder is the one holding the dashboard."""
    name, svc = service(s, "grafana")
    if name is None:
        return ["no grafana service"]
    problems = []
    if host_path(svc, GRAFANA_PROVISIONING) != PROVIDERS.parent.parent:
        problems.append(f"{name}: {PROVIDERS.parent.parent} is not mounted at {GRAFANA_PROVISIONING}")
    providers = s["providers"].get("providers") or []
    if not providers:
        problems.append(f"{PROVIDERS.name}: no dashboard providers")
    for provider in providers:
        path = (provider.get("options") or {}).get("path", "")
        folder = host_path(svc, path)
        if provider.get("type") != "file" or folder is None or DASHBOARD.parent != folder:
            problems.append(
                f"provider {provider.get('name')}: path {path!r} is not where {name} mounts {DASHBOARD.parent}"
            )
    home = environment(svc).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home is not None and host_path(svc, home) != DASHBOARD:
        problems.append(f"{name}: home dashboard {home} is not {DASHBOARD.name} in a mounted folder")
    return problems


def datasource_problems(s: dict) -> list[str]:
    """One Prometheus datasource, the prometheus service on its port, with its scrape interval."""
    problems = []
    sources = prometheus_datasources(s)
    if [d.get("uid") for d in sources] != [DATASOURCE_UID]:
        problems.append(
            f"the Prometheus datasources have uids {[d.get('uid') for d in sources]}, not one {DATASOURCE_UID}"
        )
    prometheus, svc = service(s, "prometheus")
    port = int(flag(svc, "--web.listen-address", f":{PROMETHEUS_PORT}").rpartition(":")[2])
    interval = scrape_job(s).get("scrape_interval") or (s["prometheus"].get("global") or {}).get(
        "scrape_interval"
    )
    for source in sources:
        url = urlsplit(source.get("url", ""))
        if (url.scheme, url.hostname, url.port) != ("http", prometheus, port):
            problems.append(
                f"datasource {source.get('uid')}: {source.get('url')} is not the prometheus service (http://{prometheus}:{port})"
            )
        if (source.get("jsonData") or {}).get("timeInterval") != interval:
            problems.append(
                f"datasource {source.get('uid')}: timeInterval is not the scrape interval {interval}"
            )
    return problems


def layout_problems(dashboard: dict) -> list[str]:
    problems, cells = [], {}
    ids = [p.get("id") for p in panels(dashboard)]
    problems += [f"panel id {i} is used twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    titles = [p.get("title") for p in panels(dashboard)]  # panel_queries names a query by its panel
    problems += [
        f"panel title {t!r} is used twice" for t in sorted({t for t in titles if titles.count(t) > 1})
    ]
    for panel in panels(dashboard):
        g = panel.get("gridPos") or {}
        x, y, w, h = (g.get(k, 0) for k in "xywh")
        if w < 1 or h < 1 or x < 0 or x + w > GRID_COLUMNS:
            problems.append(f"panel {panel.get('title')!r}: gridPos {g} is outside {GRID_COLUMNS} columns")
        for cell in ((cx, cy) for cx in range(x, x + w) for cy in range(y, y + h)):
            if cell in cells:
                problems.append(f"panel {panel.get('title')!r} overlaps {cells[cell]!r}")
                break
            cells[cell] = panel.get("title")
    return problems


def variable_problems(dashboard: dict, uids: set[str]) -> list[str]:
    """The ``user`` variable: every user's label (from a per-user metric), several at once, All."""
    found = [v for v in (dashboard.get("templating") or {}).get("list") or [] if v.get("name") == "user"]
    if not found:
        return ["no `user` variable"]
    var = found[0]
    query = var.get("query")
    query = query.get("query") if isinstance(query, dict) else query
    m = re.fullmatch(r"label_values\((\w+),\s*user\)", query or "")
    problems = []
    if not m or m.group(1) not in PER_USER_METRICS:
        problems.append(f"`user` variable: {query!r} is not label_values(<a per-user metric>, user)")
    if uid_of(var.get("datasource")) not in uids:
        problems.append(f"`user` variable: datasource {var.get('datasource')} is not provisioned")
    if not (var.get("multi") and var.get("includeAll") and var.get("allValue") == ".+"):
        problems.append("`user` variable: not multi-value with an All of .+ (every user, _other included)")
    return problems


def user_filter_problems(title: str, expr: str) -> list[str]:
    """Every selector of a per-user metric keeps to the users the variable selects."""
    problems = []
    for name, matchers in re.findall(r"\b(pidquota_\w+)\s*(\{[^}]*\})?", expr):
        if name in PER_USER_METRICS and not re.search(r'user\s*=~\s*"\$\{?user\}?"', matchers):
            problems.append(f'panel {title!r}: {name} is not filtered by user=~"$user"')
    return problems


def dashboard_problems(s: dict) -> list[str]:
    dashboard = s["dashboard"]
    uids = {d.get("uid") for d in prometheus_datasources(s)}
    problems = []
    if not dashboard.get("uid") or not dashboard.get("title") or dashboard.get("id") is not None:
        problems.append("the dashboard needs a uid and a title, and no id (Grafana assigns it)")
    if not 39 <= dashboard.get("schemaVersion", 0) <= 41:
        problems.append(
            f"schemaVersion {dashboard.get('schemaVersion')} is not one Grafana 11 writes (39-41)"
        )
    problems += layout_problems(dashboard) + variable_problems(dashboard, uids)
    for panel in panels(dashboard):
        title = panel.get("title")
        targets = [t for t in panel.get("targets") or [] if t.get("expr")]
        if not targets:
            problems.append(f"panel {title!r} has no target with an expr")
        for where in [panel, *(panel.get("targets") or [])]:
            if uid_of(where.get("datasource")) not in uids:
                problems.append(
                    f"panel {title!r}: datasource {where.get('datasource')} is not provisioned {sorted(uids)}"
                )
        for target in targets:
            problems += user_filter_problems(title, target["expr"])
    try:
        dashboard_queries(dashboard)
    except ValueError as exc:
        problems.append(str(exc))
    return problems


def metric_problems(s: dict) -> list[str]:
    """Only the exporter's metric names, and every one of them somewhere on the dashboard."""
    problems, used = [], set()
    for title, expr in dashboard_queries(s["dashboard"]):
        names = metric_names(expr)
        used |= names
        problems += [
            f"panel {title!r}: {n} is not in the metrics spec" for n in sorted(names - set(METRIC_NAMES))
        ]
    problems += [f"{name} is on no panel" for name in METRIC_NAMES if name not in used]
    return problems


def scrape_problems(s: dict) -> list[str]:
    """The enforcer serves metrics on a port, exposes it, and the prometheus service's
    config (its mounted prometheus.yml) scrapes it there."""
    try:
        name, config = enforcer(s)
    except PidquotaError as exc:
        return [f"the enforcer's settings do not load: {exc}"]
    if name is None:
        return ["no service runs `pidquota run`"]
    port = config["pidquota.prometheus.port"]
    if not port:
        return [f"{name} serves no metrics (pidquota.prometheus.port is {port})"]
    problems = []
    svc = s["compose"]["services"][name]
    if str(port) not in [str(p).split("/")[0] for p in svc.get("expose") or []]:
        problems.append(f"{name}: does not expose its metrics port {port}")
    job = scrape_job(s)
    if f"{name}:{port}" not in scrape_targets(job) or job.get("metrics_path", "/metrics") != "/metrics":
        problems.append(
            f"prometheus.yml: job {SCRAPE_JOB} does not scrape {name}:{port}/metrics ({scrape_targets(job)})"
        )
    prometheus, psvc = service(s, "prometheus")
    if prometheus and host_path(psvc, flag(psvc, "--config.file", PROMETHEUS_CONFIG)) != PROMETHEUS_YML:
        problems.append(f"{prometheus}: its --config.file is not {PROMETHEUS_YML} (mounted)")
    return problems


def promtool_problems(s: dict) -> list[str]:
    """``promtool`` (Debian's prometheus package; tests/run.sh installs it) parses every panel
    expression, as a recording rule named after its panel, and the scrape config."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return ["promtool is not installed (apt-get install prometheus; tests/run.sh does)"]
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"panel_{i}_" + re.sub(r"[^A-Za-z0-9]+", "_", title).lower(), "expr": e}
                    for i, (title, e) in enumerate(dashboard_queries(s["dashboard"]))
                ],
            }
        ]
    }
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, doc in (("rules", rules), ("config", s["prometheus"])):
            path = Path(tmp) / f"{kind}.yml"
            path.write_text(yaml.safe_dump(doc))
            done = subprocess.run(
                [promtool, "check", kind, str(path)], capture_output=True, text=True, timeout=60
            )
            if done.returncode != 0:
                problems.append(f"promtool check {kind}: {(done.stdout + done.stderr).strip()}")
    return problems


CHECKS = [
    service_problems,
    provisioning_problems,
    datasource_problems,
    dashboard_problems,
    metric_problems,
    scrape_problems,
    promtool_problems,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_metrics_stack_agrees_with_itself_and_the_code(check):
    assert check(stack()) == []


# -- every check can fail ---------------------------------------------------------------


def edit_service(kind: str, key: str, value) -> Callable[[dict], None]:
    """Set (None: delete) one key of the prometheus or grafana service."""

    def edit(s: dict) -> None:
        _, svc = service(s, kind)
        if value is None:
            del svc[key]
        else:
            svc[key] = value

    return edit


def replace_in(path: str, old: str, new: str) -> Callable[[dict], None]:
    """Replace text in the one string found at ``path`` (keys and list indexes, dotted)."""

    def edit(s: dict) -> None:
        *parents, last = path.split(".")
        node = s
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        last = int(last) if isinstance(node, list) else last
        assert old in node[last], (path, old, node[last])
        node[last] = node[last].replace(old, new)

    return edit


def edit_panel(title: str, change: Callable[[dict], None]) -> Callable[[dict], None]:
    def edit(s: dict) -> None:
        change(next(p for p in panels(s["dashboard"]) if p.get("title") == title))

    return edit


def set_expr(title: str, expr: str) -> Callable[[dict], None]:
    return edit_panel(title, lambda p: p["targets"][0].update(expr=expr))


def drop_panel(title: str) -> Callable[[dict], None]:
    def edit(s: dict) -> None:
        s["dashboard"]["panels"] = [p for p in s["dashboard"]["panels"] if p.get("title") != title]

    return edit


def edit_variable(key: str, value) -> Callable[[dict], None]:
    def edit(s: dict) -> None:
        s["dashboard"]["templating"]["list"][0][key] = value

    return edit


def edit_enforcer(old: str, new: str) -> Callable[[dict], None]:
    def edit(s: dict) -> None:
        command = s["compose"]["services"]["enforcer"]["command"]
        command[command.index(old)] = new

    return edit


def edit_scrape(key: str, value) -> Callable[[dict], None]:
    def edit(s: dict) -> None:
        scrape_job(s)[key] = value

    return edit


THROTTLES = "Throttled new PIDs per second"
BREAKAGES = [
    (service_problems, edit_service("grafana", "image", "grafana/grafana:latest"), "not pinned"),
    (service_problems, edit_service("prometheus", "image", "prom/prometheus:v2"), "not pinned"),
    (service_problems, edit_service("grafana", "image", "grafana:11.2.2"), "no grafana service"),
    (service_problems, edit_service("grafana", "depends_on", None), "does not depend on it"),
    (
        provisioning_problems,
        replace_in(
            "compose.services.grafana.volumes.0", "/etc/grafana/provisioning", "/etc/grafana/provision"
        ),
        "is not mounted at /etc/grafana/provisioning",
    ),
    (
        provisioning_problems,
        replace_in("providers.providers.0.options.path", "/dashboards", "/dashboard"),
        "is not where grafana mounts",
    ),
    (
        provisioning_problems,
        replace_in("compose.services.grafana.volumes.1", "./grafana/dashboards", "./grafana"),
        "is not where grafana mounts",
    ),
    (
        provisioning_problems,
        replace_in(
            "compose.services.grafana.environment.GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH",
            "pidquota",
            "home",
        ),
        "home dashboard",
    ),
    (
        datasource_problems,
        replace_in("datasources.datasources.0.url", ":9090", ":9091"),
        "not the prometheus service",
    ),
    (
        datasource_problems,
        replace_in("datasources.datasources.0.url", "prometheus:", "localhost:"),
        "not the prometheus service",
    ),
    (
        datasource_problems,
        replace_in("datasources.datasources.0.uid", "pidquota-", ""),
        "not one pidquota-prometheus",
    ),
    (
        datasource_problems,
        replace_in("datasources.datasources.0.jsonData.timeInterval", "5s", "15s"),
        "not the scrape interval",
    ),
    (datasource_problems, edit_scrape("scrape_interval", "10s"), "not the scrape interval"),
    (
        dashboard_problems,
        replace_in("datasources.datasources.0.uid", "pidquota-", ""),
        "is not provisioned",
    ),
    (
        dashboard_problems,
        edit_panel(
            THROTTLES, lambda p: p["targets"][0].update(datasource={"type": "prometheus", "uid": "prom"})
        ),
        "is not provisioned",
    ),
    (dashboard_problems, edit_panel(THROTTLES, lambda p: p.update(targets=[])), "has no target with an expr"),
    (
        dashboard_problems,
        edit_panel(THROTTLES, lambda p: p["targets"][0].update(expr="")),
        "has no target with an expr",
    ),
    (
        dashboard_problems,
        set_expr(THROTTLES, 'rate(pidquota_producer_ids_throttled_total{job="$job"}[1m])'),
        "uses $job",
    ),
    (
        dashboard_problems,
        set_expr(THROTTLES, "rate(pidquota_producer_ids_throttled_total[1m])"),
        "not filtered",
    ),
    (dashboard_problems, edit_panel(THROTTLES, lambda p: p["gridPos"].update(x=6)), "overlaps"),
    (dashboard_problems, edit_panel(THROTTLES, lambda p: p["gridPos"].update(x=20)), "outside 24 columns"),
    (dashboard_problems, edit_panel(THROTTLES, lambda p: p.update(id=1)), "panel id 1 is used twice"),
    (
        dashboard_problems,
        edit_panel(THROTTLES, lambda p: p.update(title="Tokens per user")),
        "title 'Tokens per user' is used twice",
    ),
    (dashboard_problems, edit_variable("includeAll", False), "not multi-value"),
    (dashboard_problems, edit_variable("name", "users"), "no `user` variable"),
    (
        dashboard_problems,
        edit_variable("query", {"query": "label_values(pidquota_input_events_total, user)"}),
        "not label_values",
    ),
    (
        metric_problems,
        set_expr(THROTTLES, 'rate(pidquota_producer_id_throttled_total{user=~"$user"}[1m])'),
        "pidquota_producer_id_throttled_total is not in the metrics spec",
    ),
    (metric_problems, set_expr("Event-time lag", "event_time_lag_seconds"), "not in the metrics spec"),
    (metric_problems, drop_panel("Dead letters by reason"), "pidquota_dead_letters_total is on no panel"),
    (
        scrape_problems,
        edit_scrape("static_configs", [{"targets": ["enforcer:9465"]}]),
        "does not scrape enforcer:9464",
    ),
    (scrape_problems, edit_scrape("metrics_path", "/prometheus"), "does not scrape"),
    (scrape_problems, edit_scrape("job_name", "enforcer"), "does not scrape"),
    (
        scrape_problems,
        edit_enforcer("pidquota.prometheus.port=9464", "pidquota.prometheus.port=9465"),
        "does not expose its metrics port 9465",
    ),
    (
        scrape_problems,
        edit_enforcer("pidquota.prometheus.port=9464", "pidquota.prometheus.port=0"),
        "serves no metrics",
    ),
    (
        scrape_problems,
        edit_enforcer("pidquota.prometheus.port=9464", "pidquota.prometheus.prt=9464"),
        "do not load",
    ),
    (
        scrape_problems,
        replace_in("compose.services.prometheus.volumes.0", "/etc/prometheus/", "/etc/prom/"),
        "--config.file",
    ),
    (
        promtool_problems,
        set_expr(THROTTLES, 'sum(rate(pidquota_producer_ids_throttled_total{user=~"$user"}[1m])'),
        "promtool check rules",
    ),
    (
        promtool_problems,
        set_expr(THROTTLES, "rate(pidquota_producer_ids_throttled_total[$__range] offset)"),
        "promtool check rules",
    ),
    (
        promtool_problems,
        replace_in("prometheus.global.scrape_interval", "5s", "5 s"),
        "promtool check config",
    ),
]


@pytest.mark.parametrize(
    ("check", "edit", "expected"), BREAKAGES, ids=[f"{c.__name__}:{m}" for c, _, m in BREAKAGES]
)
def test_each_check_names_a_broken_copy(check, edit, expected):
    s = copy.deepcopy(stack())
    edit(s)
    problems = check(s)
    assert any(expected in p for p in problems), problems


def test_every_check_is_exercised_by_a_breakage():
    assert {c.__name__ for c, _, _ in BREAKAGES} == {c.__name__ for c in CHECKS}


def test_promtool_missing_is_a_problem(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert promtool_problems(stack()) == [
        "promtool is not installed (apt-get install prometheus; tests/run.sh does)"
    ]


# -- the helper other tests use ---------------------------------------------------------


def test_panel_queries_substitute_every_variable_and_name_the_panel():
    queries = panel_queries(DASHBOARD, user="User:a|User:b", range_="2h", rate_interval="20s", interval="5s")
    assert len(queries) == sum(len(p["targets"]) for p in panels(load_dashboard(DASHBOARD)))
    assert all("$" not in expr and "[[" not in expr for _, expr in queries)
    assert (
        "Top offenders",
        'topk(10, sum by (user) (increase(pidquota_producer_ids_throttled_total{user=~"User:a|User:b"}[2h])))',
    ) in queries
    assert (
        THROTTLES,
        'sum by (user) (rate(pidquota_producer_ids_throttled_total{user=~"User:a|User:b"}[20s]))',
    ) in queries


@pytest.mark.parametrize("written", ["$user", "${user}", "${user:regex}", "[[user]]"])
def test_substitute_reads_each_way_grafana_writes_a_variable(written):
    assert (
        substitute(f'm{{user=~"{written}"}}[$__interval]', {"user": ".+", "__interval": "15s"})
        == 'm{user=~".+"}[15s]'
    )


def test_substitute_refuses_an_unknown_variable():
    with pytest.raises(ValueError, match=r"uses \$__range_s"):
        substitute("m[$__range_s]", {"__range": "5m"})


def test_panel_queries_reach_into_rows():
    target = {"expr": "pidquota_last_batch_id"}
    board = {"panels": [{"type": "row", "title": "r", "panels": [{"title": "inner", "targets": [target]}]}]}
    assert dashboard_queries(board) == [("inner", "pidquota_last_batch_id")]


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (user) (rate(a_total{user=~"x{1}"}[5m:1m])) > bool 0', {"a_total"}),
        ("topk(10, b) / on (user) group_left (kind) c offset 5m", {"b", "c"}),
        ("histogram_quantile(0.9, d) * 1e3 + inf - NaN", {"d"}),
        ("e and f or g unless h", {"e", "f", "g", "h"}),
        ("rate(level:metric:rate5m[1m])", {"level:metric:rate5m"}),
        ('absent(x{reason="by (user)"})', {"x"}),
    ],
)
def test_metric_names_of_an_expression(expr, names):
    assert metric_names(expr) == names


def test_the_spec_names_each_metric_once():
    assert len(set(METRIC_NAMES)) == len(METRIC_NAMES)
    assert all(re.fullmatch(r"pidquota_[a-z_]+", n) for n in METRIC_NAMES)


def test_the_metric_list_is_the_exporters():
    from pidquota.observe.exporter import Exporter

    exported = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in Exporter(3_600_000, 1).registry.collect()
    }
    assert exported == set(METRIC_NAMES)
