"""No Docker engine here: check that docker/Dockerfile agrees with the code."""

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def instructions():
    lines = [line.strip() for line in re.sub(r"\\\n", " ", DOCKERFILE).splitlines()]
    return [line.split(None, 1) for line in lines if line and not line.startswith("#")]


def test_copies_every_package_and_the_files_pip_needs():
    copied = {src for op, args in instructions() if op == "COPY" for src in args.split()[:-1]}
    for package in PYPROJECT["tool"]["setuptools"]["packages"]:
        assert package in copied, package
    assert {"pyproject.toml", "README.md"} <= copied
    for path in copied:
        assert (ROOT / path).exists(), path


def test_python_version_satisfies_requires_python_and_java_is_installed():
    base = next(args for op, args in instructions() if op == "FROM")
    version = re.match(r"python:(\d+)\.(\d+)", base).groups()
    minimum = re.match(r">=(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"]).groups()
    assert tuple(map(int, version)) >= tuple(map(int, minimum))
    assert "openjdk-17-jre-headless" in DOCKERFILE


def test_entrypoint_is_the_console_script_and_default_is_the_demo():
    ops = dict((op, args) for op, args in instructions())
    assert ops["ENTRYPOINT"] == '["pidquota"]'
    assert "pidquota" in PYPROJECT["project"]["scripts"]
    assert ops["CMD"] == '["run"]'
