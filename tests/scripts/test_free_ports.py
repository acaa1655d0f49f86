"""scripts/kafka_broker.py's free_ports: below the kernel's ephemeral range, where no outgoing
connection takes a port between its choice and a server's bind (a broker of the suite once
failed to start with "Address already in use")."""

from __future__ import annotations

import socket

import kafka_broker


def test_ports_are_distinct_free_and_below_the_ephemeral_range():
    low = kafka_broker._ephemeral_low()
    ports = kafka_broker.free_ports(50)
    assert len(set(ports)) == 50 and all(10_000 <= p < low for p in ports)
    for p in ports[:5]:  # free: a server binds it
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_in_use_is_passed_over(tmp_path, monkeypatch):
    monkeypatch.setattr(kafka_broker, "CLAIMS", tmp_path / "claims")  # not the machine's claims
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        used = taken.getsockname()[1]
        picks = iter([used, used, *range(20_001, 20_101)])
        monkeypatch.setattr(kafka_broker, "_ephemeral_low", lambda: 65_000)
        monkeypatch.setattr("random.randrange", lambda a, b: next(picks))
        [port] = kafka_broker.free_ports(1)
        assert port != used and 20_001 <= port <= 20_100


def test_a_port_another_process_claimed_is_passed_over(tmp_path, monkeypatch):
    """Two pytest workers once drew the same port in the seconds before either broker bound
    it: one worker's session broker never started and each of its Kafka tests failed. A port
    is claimed among processes for this window and the next (O_EXCL: one wins)."""
    monkeypatch.setattr(kafka_broker, "CLAIMS", tmp_path / "claims")
    monkeypatch.setattr(kafka_broker, "_swept", False)
    t = 1_796_081_272.0  # 23:27:52 UTC, 2026-11-30: the window 23:20 to 23:30
    assert kafka_broker._claim(16119, t) and (tmp_path / "claims" / "16119.2993468").exists()
    assert not kafka_broker._claim(16119, t + 1)  # the other worker, a second later
    assert not kafka_broker._claim(16119, t + 600)  # the next window still sees it
    assert kafka_broker._claim(16119, t + 1200)  # two windows on it is free again
    assert kafka_broker._claim(20000, t + 1200)
    assert sorted(p.name for p in (tmp_path / "claims").iterdir()) == [
        "16119.2993468",  # a process sweeps the past windows at its first claim only
        "16119.2993470",
        "20000.2993470",
    ]
    monkeypatch.setattr(kafka_broker, "_swept", False)
    assert kafka_broker._claim(20001, t + 1800)
    assert sorted(p.name for p in (tmp_path / "claims").iterdir()) == [
        "16119.2993470",
        "20000.2993470",
        "20001.2993471",
    ]
    picks = iter([16119, 16119, 20002])
    monkeypatch.setattr(kafka_broker, "_ephemeral_low", lambda: 65_000)
    monkeypatch.setattr("random.randrange", lambda a, b: next(picks))
    monkeypatch.setattr("time.time", lambda: t + 1800)
    assert kafka_broker.free_ports(1) == [20002]  # 16119 is claimed in the last window


def test_a_claims_folder_that_cannot_be_written_leaves_every_port_free(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(kafka_broker, "CLAIMS", tmp_path / "file" / "claims")
    assert kafka_broker._claim(16119) and kafka_broker._claim(16119)
