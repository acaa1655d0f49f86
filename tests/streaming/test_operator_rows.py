"""The stateful operator's rows (``streaming/operator.py``), built without Spark."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pidquota.quota import ADMIT, THROTTLE, PrincipalQuota, QuotaSettings
from pidquota.quota.client import Client
from pidquota.streaming.columns import KIND_METRIC
from pidquota.streaming.operator import _INDEX, _judged, decision_clients, unfold


def test_a_batch_straddling_the_replay_end_counts_only_its_live_verdicts():
    settings = QuotaSettings(window_ms=60_000)
    quota = PrincipalQuota(2, settings, 0)
    # 4 new PIDs before the replay end (t = 1000), 3 after: R = 2 per minute admits 2, throttles the rest
    ts = np.array([0, 1, 2, 3, 1000, 1001, 1002], dtype=np.int64)
    pids = np.arange(7, dtype=np.int64)
    decisions = quota.judge_batch(ts, pids, np.zeros(7, dtype=np.int64), 1000)
    rows = decisions.rows()
    live = [d.verdict for d in rows if d.timestamp >= 1000]
    assert live == [THROTTLE] * 3 and [d.verdict for d in rows[:2]] == [ADMIT] * 2
    metric = _judged("User:a", quota, decisions, len(ts), 0, False, replay_until=1000)
    assert metric[_INDEX["kind"]] == KIND_METRIC
    got = {k: metric[_INDEX[k]] for k in ("events", "admitted", "throttled", "passed", "ignored")}
    assert got == {"events": 7, "admitted": 0, "throttled": 3, "passed": 4, "ignored": 0}
    whole = _judged("User:a", quota, decisions, len(ts), 0, False)
    assert (whole[_INDEX["admitted"]], whole[_INDEX["throttled"]]) == (2, 5)


def test_the_decisions_carry_their_pids_clients_and_the_row_its_main_client():
    """Two rows of one principal (two input partitions) name PID 2 differently: the least
    identity wins, as the fold's rule; the metrics row names the most throttled client."""
    crash, deploy, other = Client("crash"), Client("deploy", address="10.0.0.9"), Client("zzz")
    pdf = pd.DataFrame(
        {
            "principal": ["User:a", "User:a"],
            "timestamps": [[0, 1, 2], [3]],
            "producer_ids": [[1, 2, 3], [4]],
            "epochs": [[0, 0, 0], [0]],
            "client_pids": [[1, 2, 3], [2, 4]],
            "clients": [[deploy.joined(), other.joined(), crash.joined()], [crash.joined(), crash.joined()]],
        }
    )
    ((principal, sightings),) = unfold(pdf).items()
    pids, clients = sightings[3]
    assert dict(zip(pids.tolist(), clients, strict=True)) == {
        1: deploy.joined(),
        2: crash.joined(),
        3: crash.joined(),
        4: crash.joined(),
    }
    quota = PrincipalQuota(1, QuotaSettings(window_ms=60_000), 0)
    decisions = quota.judge_batch(*sightings[:3])
    chosen = decision_clients(decisions, sightings[3])
    assert [Client.parse(c) for c in chosen] == [deploy, crash, crash, crash]
    row = _judged(principal, quota, decisions, 4, 0, False, clients=sightings[3])
    assert row[_INDEX["client_id"]] == "crash" and row[_INDEX["client_address"]] is None
    assert row[_INDEX["d_client"]] == chosen


def test_without_clients_the_decisions_name_none():
    pdf = pd.DataFrame({"principal": ["User:a"], "timestamps": [[0]], "producer_ids": [[1]], "epochs": [[0]]})
    pdf["client_pids"], pdf["clients"] = None, None
    ((_, sightings),) = unfold(pdf).items()
    assert sightings[3] is None
    quota = PrincipalQuota(1, QuotaSettings(window_ms=60_000), 0)
    decisions = quota.judge_batch(*sightings[:3])
    row = _judged("User:a", quota, decisions, 1, 0, False)
    assert row[_INDEX["d_client"]] == [None] and row[_INDEX["client_id"]] is None


def test_an_unlimited_principals_row_names_the_addresses_it_used_when_the_actuator_acts_by_address(
    monkeypatch,
):
    """Issue 54: the address book saw only the principals with a quota (their decisions name
    their addresses), so a connection rate could land on an address an unlimited user shares.
    An unlimited principal's metrics row now names its batch's distinct client addresses,
    bounded, and only where the actuator may act by address."""
    import pidquota.streaming.operator as operator
    from pidquota.quota.states import PrincipalStates

    joined = [
        Client("a", address="10.0.0.5").joined(),
        Client("b", address="10.0.0.5", broker="1").joined(),
        Client("c", address="10.0.0.7").joined(),
        Client("d").joined(),  # no address
    ]
    sightings = (
        np.arange(4, dtype=np.int64),
        np.arange(1, 5, dtype=np.int64),
        np.zeros(4, dtype=np.int64),
        (np.arange(1, 5, dtype=np.int64), np.asarray(joined, dtype=object)),
    )
    settings = QuotaSettings(window_ms=60_000)

    def row(**more):
        states = PrincipalStates()
        return operator.judge_principal("User:free", sightings, states, 0, None, False, settings, **more)

    assert row(addresses=True)[_INDEX["seen_addresses"]] == ["10.0.0.5", "10.0.0.7"]
    assert row()[_INDEX["seen_addresses"]] is None  # the actuator does not act by address
    monkeypatch.setattr(operator, "MAX_SEEN_ADDRESSES", 1)
    assert len(row(addresses=True)[_INDEX["seen_addresses"]]) == 1  # a bound, whatever it sends
    limited = PrincipalStates()
    tracked = operator.judge_principal("User:a", sightings, limited, 0, 10, False, settings, addresses=True)
    assert tracked[_INDEX["seen_addresses"]] is None  # its decisions name its addresses
