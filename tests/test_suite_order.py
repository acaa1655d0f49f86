"""The suite's own scheduling (tests/conftest.py's HEAVY_FIRST, tests/run.sh's pytest line): a
file renamed or moved drops out of the heavy-first order silently, and without
``--no-loadscope-reorder`` xdist ignores that order altogether."""

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _heavy_first() -> list[str]:
    """conftest.py's HEAVY_FIRST, read from its text: ``import conftest`` finds whichever
    folder's conftest.py came first (tests/actuate/ has one too)."""
    tree = ast.parse((TESTS / "conftest.py").read_text())
    (value,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["HEAVY_FIRST"]
    ]
    return list(ast.literal_eval(value))


def test_every_heavy_file_exists_once():
    heavy = _heavy_first()
    assert len(heavy) > 10 and len(set(heavy)) == len(heavy)
    assert [name for name in heavy if not (TESTS / name).is_file()] == []


def test_the_test_command_keeps_the_order():
    (line,) = [line for line in (TESTS / "run.sh").read_text().splitlines() if "-m pytest" in line]
    assert "--dist loadfile" in line and "--no-loadscope-reorder" in line
