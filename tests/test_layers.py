"""The packages' layers point one way: conf at the bottom, then bloom, quota,
store and traffic, then streaming (with the CLI). Lazy imports count too."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# package -> the packages it may import
ALLOWED = {
    "conf": set(),
    "bloom": {"conf"},
    "quota": {"conf", "bloom"},
    "store": {"conf", "bloom", "quota"},
    "traffic": {"conf", "bloom", "quota", "store"},
    "streaming": {"conf", "bloom", "quota", "store", "traffic"},
}


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    return found & set(ALLOWED)


def test_layers_point_one_way():
    wrong = []
    for package, allowed in ALLOWED.items():
        for path in sorted((ROOT / package).glob("*.py")):
            for target in imported_packages(path) - allowed - {package}:
                wrong.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not wrong, "layer violations:\n" + "\n".join(wrong)
