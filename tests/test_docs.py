"""The README's promises match the code."""

import re
from pathlib import Path

from pidquota.conf.settings import SETTINGS
from pidquota.streaming.columns import DEAD_LETTER_COLUMNS, DECISION_COLUMNS, METRIC_COLUMNS
from pidquota.streaming.schema import EVENT_FIELDS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_settings_table_is_the_generated_one():
    from pidquota.conf.loader import render_markdown

    block = README.split("<!-- settings:start")[1].split("-->", 1)[1].split("<!-- settings:end -->")[0]
    assert block.lstrip("\n") == render_markdown()


def test_every_setting_is_documented_with_its_default():
    for s in SETTINGS:
        row = next((line for line in README.splitlines() if line.startswith(f"| `{s.name}` |")), None)
        assert row is not None, s.name
        assert f"`{s.shown_default}`" in row, (s.name, row)


def test_every_event_field_and_output_column_is_documented():
    for name, *_ in EVENT_FIELDS:
        assert f"| `{name}` |" in README, name
    for col in (*DECISION_COLUMNS, *METRIC_COLUMNS, *DEAD_LETTER_COLUMNS):
        assert re.search(rf"\b{col}\b", README), col


def test_the_two_commands_and_ci_use_the_same_test_command():
    assert "python3 -m pip install -e . && pidquota run" in README
    assert "bash tests/run.sh" in README
    assert "bash tests/run.sh" in (ROOT / ".ci" / "run").read_text()
