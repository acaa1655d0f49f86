"""``pidquota recommend`` on Spark: its statistics equal the pandas reference, a what-if with the
suggested quotas throttles no well-behaved user, and a what-if with the generator's quota file
gives the enforcer's own throttle counts exactly."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from pidquota.conf.loader import load
from pidquota.quota import StaticQuotas
from pidquota.recommend import job as recommend_job
from pidquota.recommend import stats as rec
from pidquota.traffic.generator import TrafficGenerator

W = 3_600_000
WELL_BEHAVED = [
    "User:steady-orders",
    "User:steady-payments",
    "User:txn-ledger",
    "User:returning",
    "User:legacy",
]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Two hours of the default mix at 10 requests/s, as a file and as an events frame."""
    gen = TrafficGenerator(seed=9, rate=10)
    _, lines = gen.events(gen.start_ms + 2 * W)
    folder = tmp_path_factory.mktemp("recommend")
    path = folder / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    docs = [json.loads(x) for x in lines]
    frame = pd.DataFrame(
        [(d["principal"], d["producer_id"], d["timestamp"]) for d in docs],
        columns=["principal", "producer_id", "timestamp"],
    )
    return path, frame


@pytest.fixture(scope="module")
def config():
    return load(environ={}, overrides={"pidquota.spark.shuffle.partitions": "2"})


def test_the_spark_statistics_equal_the_reference(spark, generated, config):
    path, frame = generated
    stats, what_if = recommend_job.compute(str(path), config, None)
    expected = rec.reference_stats(frame, W, W // 4)
    assert what_if is None
    assert len(stats) == 7  # User:legacy has no PID >= 0
    pd.testing.assert_frame_equal(
        stats.reset_index(drop=True), expected.reset_index(drop=True), check_dtype=False
    )


def test_the_suggested_quotas_throttle_no_well_behaved_user(spark, generated, config):
    path, _ = generated
    stats, _ = recommend_job.compute(str(path), config, None)
    usage = rec.with_suggestions(stats, 2.0)
    quotas = dict(zip(usage.principal, usage.suggested, strict=True))
    said = []
    _, what_if = recommend_job.compute(str(path), config, quotas, say=said.append)
    assert [line.rsplit(" (", 1)[0] for line in said] == [  # the command's progress lines
        "starting Spark",
        f"pass 1 of 2: each user's statistics from {path}",
        "pass 2 of 2: what the quotas would throttle, by the enforcer itself",
        "done",
    ]
    throttles = dict(zip(what_if.principal, what_if.throttles, strict=True))
    for user in WELL_BEHAVED:
        assert throttles.get(user, 0) == 0, user


def test_a_what_if_with_the_quota_file_is_the_enforcers_own_count(spark, generated, config, tmp_path):
    from harness.enforcer import Enforcer

    path, _ = generated
    quotas = dict(StaticQuotas.from_file("conf/quotas.json").snapshot())
    _, what_if = recommend_job.compute(str(path), config, quotas)
    enforcer = Enforcer(spark, tmp_path, quotas)
    decisions = enforcer.run(path.read_text().splitlines())["decisions"]
    own = decisions[decisions.verdict == "THROTTLE"].groupby("principal").size()
    got = what_if.set_index("principal")["throttles"]
    assert own.sum() > 0
    assert {u: int(n) for u, n in got.items() if n} == {u: int(n) for u, n in own.items()}


def test_a_short_first_look_still_finds_the_flood_and_leaves_pidquota_s_own_clients_out(
    spark, config, tmp_path, capsys
):
    """Issue 42 §4: on a 9-minute input a 533-PID crash loop (over 100 x the median user) was no
    flood with the default short life (no PID's life judged under 2 x 300 s), the <default>
    came out at twice the flood's peak, and pidquota's own journal producer was a user."""
    from pidquota.cli.main import main

    t0, lines = 1_700_000_000_000, []
    for s in range(0, 540, 1):  # 9 minutes: the loop a new PID a second, steady users one PID each
        t = t0 + s * 1000
        lines.append({"timestamp": t, "principal": "User:crash", "producer_id": 10_000 + s})
        for i, user in enumerate(("orders", "payments", "ledger", "billing")):
            if s % 10 == 0:
                lines.append({"timestamp": t, "principal": f"User:{user}", "producer_id": 100 + i})
        if s % 5 == 0:  # the actuator's journal producer, a new PID each time, on its own client id
            lines.append(
                {
                    "timestamp": t,
                    "principal": "User:pidquota",
                    "producer_id": 50_000 + s,
                    "client_id": "pidquota",
                }
            )
    path = tmp_path / "first-look.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    flags = ["--set", "pidquota.spark.shuffle.partitions=2", "--no-what-if"]
    assert main(["recommend", "--input", str(path), *flags]) == 0
    captured = capsys.readouterr()
    assert "judged against 134 s, a quarter of it" in captured.err
    assert "User:crash" in captured.out and "No user is a suspected flood." not in captured.out
    assert "User:pidquota" not in captured.out
    suggested = int(captured.out.split("Suggested <default>: ")[1].split(" ")[0])
    assert suggested < 20, captured.out  # from the steady users, not the flood
