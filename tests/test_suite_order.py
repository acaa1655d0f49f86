"""The suite's own scheduling (tests/conftest.py's HEAVY_FIRST, tests/run.sh's pytest line): a
file renamed or moved drops out of the heavy-first order silently, and without
``--no-loadscope-reorder`` xdist ignores that order altogether."""

from pathlib import Path

from conftest import HEAVY_FIRST

TESTS = Path(__file__).parent


def test_every_heavy_file_exists_once():
    assert len(set(HEAVY_FIRST)) == len(HEAVY_FIRST)
    assert [name for name in HEAVY_FIRST if not (TESTS / name).is_file()] == []


def test_the_test_command_keeps_the_order():
    (line,) = [line for line in (TESTS / "run.sh").read_text().splitlines() if "-m pytest" in line]
    assert "--dist loadfile" in line and "--no-loadscope-reorder" in line
