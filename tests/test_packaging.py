"""One import root, ``pidquota``: the wheel installs nothing else at the top, the code the tests
import is this checkout's own, and the installed command works beside distributions that own
the names pidquota's folders have (``streaming``, ``conf``, ``store``, ``quota``, ``bloom``,
``traffic``)."""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib
import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
PACKAGE_DIRS = SETUPTOOLS["package-dir"]
FOLDERS = {folder for folder in PACKAGE_DIRS.values()}
# Top-level names that other distributions on PyPI own (mosaicml-streaming installs `streaming`).
SQUATTED = ("streaming", "conf", "store", "quota", "bloom", "traffic")
# What the wheel test does not copy of the checkout.
IGNORED = (
    ".git",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    "pidquota-out",
)


@pytest.mark.parametrize("package", sorted(PACKAGE_DIRS))
def test_every_subpackage_is_imported_from_this_checkout(package):
    module = importlib.import_module(package)
    expected = (ROOT / PACKAGE_DIRS[package] / "__init__.py").resolve()
    assert Path(module.__file__).resolve() == expected, (
        f"{package} is imported from {module.__file__}, not this checkout's {expected}: "
        "reinstall with `python3 -m pip install -e .`"
    )


def test_every_package_of_the_tree_is_in_pyproject():
    listed = set(SETUPTOOLS["packages"])
    found = set()
    for package, folder in PACKAGE_DIRS.items():
        root = ROOT / folder
        inits = [root / "__init__.py"] if package == "pidquota" else root.rglob("__init__.py")
        for init in inits:
            rel = init.parent.relative_to(root).parts
            found.add(".".join((package, *rel)))
    assert found == listed


def python_files() -> list[Path]:
    out = []
    for top in [*FOLDERS, "tests", "benchmarks"]:
        out += [p for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts]
    return out


def bare_imports(text: str) -> list[str]:
    """Imports of a top-level name that is one of pidquota's folders but not ``pidquota``."""
    names = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return [n for n in names if n.split(".")[0] in FOLDERS - {"pidquota"}]


def test_nothing_imports_a_bare_folder_name():
    wrong = {
        str(p.relative_to(ROOT)): found
        for p in python_files()
        if (found := bare_imports(p.read_text(encoding="utf-8")))
    }
    assert not wrong, f"import pidquota.X instead: {wrong}"


def test_the_bare_import_finder_finds_one():
    assert bare_imports("import streaming.cli\nfrom conf.loader import load\nimport pidquota.conf\n") == [
        "streaming.cli",
        "conf.loader",
    ]


def test_nothing_runs_a_bare_module():
    """``python -m streaming.cli`` and the like, in scripts, tests, benchmarks and docker files."""
    texts = [*python_files(), *(ROOT / "scripts").iterdir(), *(ROOT / "docker").rglob("*")]
    wrong = [
        str(p.relative_to(ROOT))
        for p in texts
        if p.is_file()
        and p != Path(__file__).resolve()
        and any(f"-m {folder}." in p.read_text(errors="replace") for folder in FOLDERS - {"pidquota"})
    ]
    assert not wrong


def _squatter(tmp: Path, name: str) -> Path:
    """A wheel of a distribution that owns the top-level package ``name``; importing it fails
    loudly, so pidquota importing it by mistake cannot pass. Written as the wheel format has it
    (PEP 427: the package, METADATA, WHEEL, RECORD with each file's hash): pip installs it
    without building, where six setuptools builds, each in an isolated environment fetched
    anew, took most of this test's minute."""
    dist, files = f"squatter_{name}-1.0", {}
    files[f"{name}/__init__.py"] = f"raise ImportError('this is squatter-{name}, not pidquota')\n"
    files[f"{dist}.dist-info/METADATA"] = f"Metadata-Version: 2.1\nName: squatter-{name}\nVersion: 1.0\n"
    files[f"{dist}.dist-info/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: pidquota-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist}.dist-info/RECORD"] = "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n"
    wheel = tmp / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return wheel


def _see_our_dependencies(python: Path) -> None:
    """The new venv imports pidquota's dependencies (numpy, pandas, pyspark) from this
    interpreter's site-packages, after its own: a path file names them, so that folder's own
    path files (this checkout's editable pidquota among them) are not run. ``venv
    --system-site-packages`` reached only the base interpreter's, which in a venv of its own (a
    fresh machine's) has none of them."""
    found = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    ours = dict.fromkeys(
        [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
        + [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]  # a venv's base's, Debian's
    )
    (Path(found.stdout.strip()) / "_pidquota_tests_dependencies.pth").write_text("\n".join(ours) + "\n")


def _pip(python: Path | str, *args: str) -> None:
    done = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.e2e
def test_the_wheel_installs_pidquota_alone_and_runs_beside_squatters(tmp_path):
    # built from a copy: setuptools leaves build/ behind in the tree it builds
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*IGNORED))
    wheels = tmp_path / "wheels"
    _pip(sys.executable, "wheel", "--no-deps", "-w", str(wheels), str(source))
    (wheel,) = wheels.glob("pidquota-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"pidquota"}, tops
    # package data the run needs: the Python workers' site file (pidquota.spark.python.installed)
    assert "pidquota/streaming/worker_site/sitecustomize.py" in names, sorted(names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    _see_our_dependencies(python)
    squatters = [str(_squatter(tmp_path, name)) for name in SQUATTED]
    _pip(python, "install", "--no-deps", *squatters)
    _pip(python, "install", "--no-deps", str(wheel))
    work = tmp_path / "work"
    work.mkdir()
    probe = subprocess.run(
        [str(python), "-c", "import pidquota.cli.main as m, streaming; print(m.__file__)"],
        capture_output=True,
        text=True,
        cwd=work,
    )
    assert "this is squatter-streaming" in probe.stderr  # the squatter owns `streaming` here
    where = subprocess.run(
        [str(python), "-c", "import pidquota.cli.main as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        cwd=work,
    )
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr  # the wheel's, not the checkout's

    events = work / "events.jsonl"
    events.write_text(
        "".join(
            json.dumps({"timestamp": 1_700_000_000_000 + i, "principal": "User:loop", "producer_id": i})
            + "\n"
            for i in range(120)
        )
    )
    quotas = work / "quotas.json"
    quotas.write_text(json.dumps({"users": {"User:loop": {"producer_ids_rate": 100}}}))
    run = subprocess.run(
        [str(venv / "bin" / "pidquota"), "run", "--input", str(events), "--output", "out", "--once"]
        + ["--quotas", str(quotas)],
        capture_output=True,
        text=True,
        cwd=work,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    decisions = [
        json.loads(line)
        for part in sorted((work / "out" / "decisions").glob("*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    verdicts = [d["verdict"] for d in decisions]
    assert len(verdicts) == 120 and verdicts.count("THROTTLE") == 20, verdicts  # a burst of R = 100
