"""Every registered format keeps the protocol of ``pidquota/formats/__init__.py``, and the
registry (``pidquota.conf.formats``) is what the CLI, the settings and the sniffer read."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import pidquota.formats as formats
from pidquota.cli import formats as formats_cli
from pidquota.cli.main import parser
from pidquota.conf import formats as registry
from pidquota.conf.errors import ConfigError
from pidquota.conf.loader import load
from pidquota.conf.settings import BY_NAME
from pidquota.formats.folded import FOLDED, screened_schema

LINES = pa.schema([("value", pa.binary()), ("source_file", pa.string())])


@pytest.mark.parametrize("name", registry.names())
def test_each_format_keeps_the_protocol(name):
    fmt = formats.get(name)
    assert fmt.entry is registry.entry(name) and fmt.entry.module in fmt.__module__
    assert fmt.reads in ("lines", "batch-headers")
    assert set(fmt.entry.inputs) <= {"file", "kafka"} and fmt.entry.inputs
    assert fmt.strict is None or callable(formats.strict_of(fmt))
    options = fmt.options(load(None, {}))
    assert options.get("inputFormat") == name and all(isinstance(v, str) for v in options.values())
    assert formats.of_options({k.lower(): v for k, v in options.items()}) is fmt
    assert isinstance(fmt.said(load(None, {})), str)


@pytest.mark.parametrize("name", [n for n in registry.names() if formats.get(n).reads == "lines"])
def test_a_line_formats_screen_accounts_for_every_line_and_raises_on_none(name):
    fmt = formats.get(name)
    screen = fmt.screen(LINES, 256, fmt.options(load(None, {})))
    assert screen.schema.names == screened_schema(LINES).names
    assert screen.schema.names[: len(FOLDED)] == [n for n, _ in FOLDED]
    hostile = [b"", b"\x00\xff", b"{" * 5000, b"not a record", '{"principal": "\u00e9"}'.encode()]
    batch = pa.RecordBatch.from_arrays(
        [pa.array(hostile, pa.binary()), pa.array(["f"] * len(hostile))], schema=LINES
    )
    out = list(screen.screen(batch))
    assert all(b.schema.names == screen.schema.names for b in out)
    unchecked = sum(pa.compute.sum(b.column("check")).as_py() or 0 for b in out)
    judged = [json.loads(d) for b in out for d in b.column("f_dead").to_pylist() if d]
    dead = sum(1 for d in judged if "reason" in d)
    skipped = sum(n for d in judged for n in d.get("skipped", {}).values())
    assert unchecked + dead + skipped == len(hostile)  # nothing lost, nothing raised
    assert fmt.strict is not None or unchecked == 0  # a format without a strict parse leaves none


def test_the_registry_names_the_choices_of_the_setting_and_the_flag():
    for name in registry.names():
        assert load(None, {"pidquota.input.format": name})["pidquota.input.format"] == name
    with pytest.raises(
        ConfigError, match="= 'parquet' .* is not a format pidquota reads; give one of plugin-inits, events"
    ):
        load(None, {"pidquota.input.format": "parquet"})
    assert (
        registry.DEFAULT in registry.names() and BY_NAME["pidquota.input.format"].default == registry.DEFAULT
    )
    run = next(
        a for a in parser()._subparsers._group_actions[0].choices["run"]._actions if a.dest == "input_format"
    )
    assert tuple(run.choices) == registry.names()


def test_an_unknown_format_names_the_choices():
    with pytest.raises(
        ConfigError,
        match="'parquet' is not a format pidquota reads; give one of plugin-inits, events, kafka-request-log",
    ):
        formats.get("parquet")


def test_an_input_a_format_does_not_come_from_is_refused_with_the_flag():
    said = registry.entry("record-batches").refuses("file", "file input 'in'")
    assert said == (
        "--input-format record-batches reads the record batches of Kafka topics, not file input 'in'; "
        "give --input kafka://HOST[:PORT]/TOPIC[,TOPIC...] (a * matches topics)"
    )
    assert registry.entry("events").refuses("kafka", "x") is None


def test_pidquota_formats_lists_each_with_its_inputs(capsys):
    from pidquota.cli.main import main

    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "events (the default)"
    assert "record-batches\n  the log audit" in out and "from Kafka topics; client identity: none" in out
    assert out.count("\n\n") == len(registry.FORMATS) - 1 == len(formats_cli.lines()) // 4


def test_no_module_outside_the_formats_names_one_but_the_generator():
    """A format's name lives in its registry line and its module: a module elsewhere that
    tested ``fmt == "kafka-request-log"`` would be one more file to touch for a new format.
    The generator writes the request log, so it names it; the default format is also a
    word (the metrics' ``events`` column)."""
    import ast
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[2]
    named = set(registry.names()) - {registry.DEFAULT}
    folders = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    found = []
    for package, folder in folders.items():
        base = root / folder
        for path in base.glob("*.py") if package == "pidquota" else base.rglob("*.py"):
            where = path.relative_to(root).as_posix()
            if where.startswith("formats/") or where in ("conf/formats.py", "cli/generate.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and node.value in named:
                    found.append(f"{where}:{node.lineno} {node.value!r}")
    assert not found
