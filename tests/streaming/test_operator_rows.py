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
    assert row[_INDEX["d_client"]] is None and row[_INDEX["client_id"]] is None  # null: no PID named one


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


def test_a_group_in_one_pass_gives_the_rows_and_states_of_one_principal_at_a_time(monkeypatch):
    """streaming/operator.py's judge_together (quota/group.py) against judge_principal for every
    principal: one with clients named over two rows, an unlimited one, one with nothing
    idempotent, one whose saved state has layers of the old hash (left to the per-principal
    path), and new ones in a flood, over three batches: the same rows, in the same order, and
    the same states."""
    from pathlib import Path

    from pidquota.quota import StaticQuotas, group
    from pidquota.quota.states import PrincipalStates
    from pidquota.streaming import operator as op

    old = (Path(__file__).parents[1] / "quota" / "data" / "state-v2-bloom-v1.bin").read_bytes()
    crash, deploy = Client("crash"), Client("deploy", address="10.0.0.9")
    settings = QuotaSettings(window_ms=60_000)
    quotas = StaticQuotas({p: 5 for p in ("User:a", "User:neg", "User:old", "User:flood")})  # User:free: none
    judge = op.make_state_function(quotas, settings)

    def batch(k: int) -> pd.DataFrame:
        t = 1_000 + 20_000 * k
        flood = list(range(100 * k, 100 * k + 40))
        return pd.DataFrame(
            {
                "principal": ["User:a", "User:free", "User:neg", "User:old", "User:a", "User:flood"],
                "timestamps": [[t, t + 1, t + 2], [t], [t, t], [t + 5], [t + 3], [t + i for i in range(40)]],
                "producer_ids": [[1, 2, 3 + k], [7], [-1, -1], [9 + k], [4], flood],
                "epochs": [[0, 0, 0], [0], [0, 0], [0], [0], [0] * 40],
                "client_pids": [[1, 2], None, None, None, [2, 4], None],
                "clients": [[deploy.joined(), crash.joined()], None, None, None, [crash.joined()] * 2, None],
            }
        )

    class State:  # what the state function reads and writes of Spark's GroupState
        def __init__(self, blob: bytes) -> None:
            self.blob, self.hasTimedOut = blob, False

        exists = property(lambda self: self.blob is not None)
        get = property(lambda self: (self.blob,))

        def getCurrentWatermarkMs(self):  # noqa: N802 (Spark's name)
            return 0

        def update(self, value):
            self.blob = value[0]

        def setTimeoutTimestamp(self, ms):  # noqa: N802 (Spark's name)
            pass

    start = PrincipalStates()
    start.put("User:old", old, 0)
    outcomes, alone = {}, []
    one = op.judge_principal
    monkeypatch.setattr(op, "judge_principal", lambda name, *a, **k: alone.append(name) or one(name, *a, **k))
    monkeypatch.setattr(group.kernel, "LOAD_AFTER", 0)  # the kernel loaded at once, not after 20k sightings
    for together in (False, True):
        monkeypatch.setattr(group, "use_group", together)
        alone.clear()
        state, rows = State(start.to_bytes()), []
        for k in range(3):
            for out in judge(("#1",), iter([batch(k)]), state):
                rows.append(out.to_numpy().tolist())
        outcomes[together] = (rows, PrincipalStates.from_bytes(state.blob).entries)
    assert group.available()
    assert outcomes[True] == outcomes[False]
    rows, entries = outcomes[True]
    assert sorted(entries) == ["User:a", "User:flood", "User:old"]  # User:neg: nothing to track
    assert sum(len(frame) for frame in rows) == 3 * 5  # a row per principal, User:a's two rows folded
    assert sorted(set(alone)) == ["User:free", "User:neg", "User:old"]  # the rest in one pass
