"""pidquota's layers point one way, and no modules import each other in a circle.

Layers, bottom first: conf; bloom; quota; store, actuate and traffic; formats (what an
input's records mean); sources (where they come from: files, followed files, Kafka topics, the
demo); streaming (the Spark query and its outputs); observe and
recommend; cli. Lazy imports (inside a
function) count too: they run on some path, and a circle hidden in a function is still
a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
# subpackage -> the subpackages it may import
BELOW = {
    "conf": set(),
    "bloom": {"conf"},
    "quota": {"conf", "bloom"},
    "store": {"conf", "bloom", "quota"},
    "actuate": {"conf", "bloom", "quota", "store"},
    "traffic": {"conf", "bloom", "quota", "store"},
    "formats": {"conf", "bloom", "quota", "store"},
    "sources": {"conf", "bloom", "quota", "store", "traffic", "formats"},
    "streaming": {"conf", "bloom", "quota", "store", "actuate", "traffic", "formats", "sources"},
    "observe": {"conf", "bloom", "quota", "store", "actuate", "traffic", "formats", "sources", "streaming"},
    "recommend": {"conf", "bloom", "quota", "store", "traffic", "formats", "sources", "streaming"},
    "cli": {
        "conf",
        "bloom",
        "quota",
        "store",
        "actuate",
        "traffic",
        "formats",
        "sources",
        "streaming",
        "observe",
        "recommend",
    },
    "": {"cli"},  # pidquota/__init__.py and __main__.py
}
# Modules that must import without Spark: the CLI's start-up checks run before it starts.
SPARK_FREE = ("pidquota.cli.preflight", "pidquota.cli.run_plan")


def modules() -> dict[str, Path]:
    """Every module of the pidquota package, by dotted name, from pyproject's package-dir."""
    found = {}
    for package, folder in PACKAGE_DIRS.items():
        root = ROOT / folder
        files = root.glob("*.py") if package == "pidquota" else root.rglob("*.py")
        for path in files:
            parts = (*package.split("."), *path.relative_to(root).with_suffix("").parts)
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = modules()


def imports(name: str, path: Path) -> set[str]:
    """The pidquota modules ``name`` imports, resolved to modules (``from a import b``
    names module ``a.b`` when there is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in out if m in MODULES and m != name}


GRAPH = {name: imports(name, path) for name, path in MODULES.items()}


def layer(module: str) -> str:
    """The subpackage of pyproject's package-dir that ``module`` is in ("" for pidquota's own)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and f"pidquota.{parts[1]}" in PACKAGE_DIRS else ""


def test_every_folder_of_package_dir_is_a_layer():
    assert {layer(p) for p in PACKAGE_DIRS} == set(BELOW)


def test_layers_point_one_way():
    wrong = [
        f"{MODULES[m].relative_to(ROOT)} ({m}) imports {t}"
        for m, targets in sorted(GRAPH.items())
        for t in sorted(targets)
        if layer(t) != layer(m) and layer(t) not in BELOW[layer(m)]
    ]
    assert not wrong, "layer violations:\n" + "\n".join(wrong)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_modules_import_each_other_in_a_circle():
    assert circles(GRAPH) == []


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_a_private_name_of_another():
    wrong = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pidquota"):
                wrong += [
                    f"{name} imports {node.module}.{a.name}" for a in node.names if a.name.startswith("_")
                ]
    assert not wrong, "\n".join(wrong)


def test_the_start_up_checks_import_no_spark():
    """What ``pidquota run`` checks before Spark starts must not import pyspark (a bad flag
    answers in a fraction of a second, not after a JVM)."""

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(GRAPH[m])
        return seen

    for start in SPARK_FREE:
        spark = [
            m
            for m in sorted(reaches(start))
            if any(
                isinstance(n, (ast.Import, ast.ImportFrom))
                and any((getattr(n, "module", None) or a.name).startswith("pyspark") for a in n.names)
                for n in ast.walk(ast.parse(MODULES[m].read_text(encoding="utf-8")))
            )
        ]
        assert not spark, f"{start} reaches pyspark through {spark}"
