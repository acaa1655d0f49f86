"""No Docker engine here: check that docker/Dockerfile agrees with the code."""

import fnmatch
import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# The JRE packages each Debian release ships (packages.debian.org, main and security).
# A python:X.Y-slim tag without a release follows Debian's newest: it was bookworm and
# is now trixie, where the openjdk-17 package of a bookworm-era Dockerfile does not exist.
DEBIAN_JRES = {
    "bullseye": {"openjdk-11-jre-headless", "openjdk-17-jre-headless"},
    "bookworm": {"openjdk-17-jre-headless"},
    "trixie": {"openjdk-21-jre-headless", "openjdk-25-jre-headless"},
}


def instructions_of(dockerfile: str) -> list[list[str]]:
    lines = [line.strip() for line in re.sub(r"\\\n", " ", dockerfile).splitlines()]
    return [line.split(None, 1) for line in lines if line and not line.startswith("#")]


def instructions():
    return instructions_of(DOCKERFILE)


def test_copies_every_package_and_the_files_pip_needs():
    copied = {src for op, args in instructions() if op == "COPY" for src in args.split()[:-1]}
    for package, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items():
        assert folder in copied, (package, folder)
    assert {"pyproject.toml", "README.md"} <= copied
    for path in copied:
        assert (ROOT / path).exists(), path


def test_python_version_satisfies_requires_python_and_java_is_installed():
    base = next(args for op, args in instructions() if op == "FROM")
    version = re.match(r"python:(\d+)\.(\d+)", base).groups()
    minimum = re.match(r">=(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"]).groups()
    assert tuple(map(int, version)) >= tuple(map(int, minimum))


def base_release(base: str) -> str | None:
    """The Debian codename a ``python:`` tag names (``3.11-slim-bookworm``), or None."""
    tag = base.split(":", 1)[1] if ":" in base else ""
    last = tag.rsplit("-", 1)[-1]
    return last if last in DEBIAN_JRES else None


def installed_jres(dockerfile: str) -> set[str]:
    return set(re.findall(r"\bopenjdk-\d+-jre(?:-headless)?\b", dockerfile))


def supported_java_majors() -> set[int]:
    """The JDKs pidquota's own Java check asks for ("Spark needs a JDK 17 or 21")."""
    session = (ROOT / "streaming" / "session.py").read_text()
    found = re.search(r"needs a JDK (\d+) or (\d+)", session)
    assert found, "streaming/session.py no longer says which JDKs Spark needs"
    return {int(major) for major in found.groups()}


def jdk_problems(dockerfile: str) -> list[str]:
    """Why the base and the JDK it installs do not fit together (empty: they do)."""
    args = next(args for op, args in instructions_of(dockerfile) if op == "FROM").split()
    base = next(a for a in args if not a.startswith("--"))  # past --platform=...
    release = base_release(base)
    if release is None:
        return [f"FROM {base} names no Debian release ({', '.join(DEBIAN_JRES)}): it floats to the newest"]
    jres = installed_jres(dockerfile)
    problems = [] if jres else ["no openjdk-N-jre package is installed"]
    for jre in sorted(jres):
        if jre not in DEBIAN_JRES[release]:
            problems.append(f"{jre} does not exist in {release} (it has {sorted(DEBIAN_JRES[release])})")
        major = int(re.search(r"\d+", jre).group())
        if major not in supported_java_majors():
            problems.append(f"{jre}: Spark 4 and pidquota need Java {sorted(supported_java_majors())}")
    return problems


def test_base_names_its_debian_release_and_the_jdk_exists_there():
    assert jdk_problems(DOCKERFILE) == []


def test_jdk_check_refuses_a_floating_base_and_a_jdk_the_release_lacks():
    jdk17 = "RUN apt-get install -y openjdk-17-jre-headless\n"
    assert "names no Debian release" in jdk_problems("FROM python:3.11-slim\n" + jdk17)[0]
    assert "does not exist in trixie" in jdk_problems("FROM python:3.11-slim-trixie\n" + jdk17)[0]
    assert (
        "need Java"
        in jdk_problems("FROM python:3.11-slim-bullseye\nRUN apt-get install -y openjdk-11-jre-headless\n")[0]
    )
    assert jdk_problems("FROM python:3.11-slim-trixie\nRUN apt-get install openjdk-21-jre-headless\n") == []


def test_every_packaged_conf_file_is_installed():
    """COPY conf copies the folder whole; pip installs only what package-data names."""
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["pidquota.conf"] + ["*.py"]
    for path in (ROOT / "conf").iterdir():
        if path.is_file() and not path.name.startswith("."):
            assert any(fnmatch.fnmatch(path.name, p) for p in patterns), (path.name, patterns)


def test_entrypoint_is_the_console_script_and_default_is_the_demo():
    ops = dict((op, args) for op, args in instructions())
    assert ops["ENTRYPOINT"] == '["pidquota"]'
    assert "pidquota" in PYPROJECT["project"]["scripts"]
    assert ops["CMD"] == '["run"]'
