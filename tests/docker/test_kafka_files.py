"""The broker files under docker/kafka/ are the ones the tests' Apache Kafka runs, and every
log4j2 snippet docs/real-cluster.md shows is a piece of one of them, word for word: a snippet
an operator copies has run on a real broker (tests/sources/test_request_log_broker.py
runs log4j2.yaml, turned off and on, and log4j2-init-producer-id.yaml)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KAFKA = ROOT / "docker" / "kafka"
PAGE = ROOT / "docs" / "real-cluster.md"
RUN = {  # file -> the test code that starts a broker with it
    "log4j2.yaml": ROOT / "scripts" / "kafka_broker.py",
    "log4j2-init-producer-id.yaml": ROOT / "tests" / "sources" / "test_request_log_broker.py",
}


def snippets(text: str, lang: str) -> list[list[str]]:
    return [
        [x.strip() for x in b.splitlines() if x.strip()]
        for b in re.findall(rf"```{lang}\n(.*?)```", text, re.S)
    ]


def contains(lines: list[str], piece: list[str]) -> bool:
    return any(lines[i : i + len(piece)] == piece for i in range(len(lines) - len(piece) + 1))


def test_every_log4j2_snippet_of_the_page_is_a_piece_of_a_file_a_broker_runs():
    files = {name: [x.strip() for x in (KAFKA / name).read_text().splitlines() if x.strip()] for name in RUN}
    found = [
        b
        for b in snippets(PAGE.read_text(), "yaml")
        if any("RequestAppender" in x or "request.logger" in x for x in b)
    ]
    assert len(found) >= 2  # the logger at DEBUG, and the filter
    for piece in found:
        assert any(contains(lines, piece) for lines in files.values()), piece


@pytest.mark.parametrize("name", sorted(RUN))
def test_each_broker_file_is_started_by_a_test(name):
    assert (KAFKA / name).exists() and name in RUN[name].read_text()


def test_a_snippet_that_is_not_in_the_files_is_caught():
    lines = [x.strip() for x in (KAFKA / "log4j2.yaml").read_text().splitlines() if x.strip()]
    assert not contains(lines, ["- name: kafka.request.logger", "level: TRACE"])
    assert contains(lines, ["- name: kafka.request.logger", "level: DEBUG"])
