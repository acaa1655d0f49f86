"""The falling-behind note: one line after a run of slow batches, not one per batch."""

from __future__ import annotations

from pidquota.observe.pace import Pace


def progress(batch_id, took_ms):
    return {"batchId": batch_id, "durationMs": {"triggerExecution": took_ms}}


def watch(durations, trigger_ms=2000, clock=lambda: 0.0, repeat=1):
    said = []
    pace = Pace(trigger_ms, out=said.append, clock=clock)
    for batch_id, took in enumerate(durations):
        for _ in range(repeat):  # the wait loop sees the same report about once a second
            pace.observe(progress(batch_id, took))
    return said


def test_the_worked_example_says_it_once():
    said = watch([9744, 2759, 2124, 2500], repeat=3)
    assert said == [
        "pidquota: the last 3 batches took 2.1-2.8 s, longer than the 2 s trigger interval: the stream "
        "is falling behind. Raise pidquota.trigger.interval.ms, or give Spark more cores"
    ]


def test_a_slow_first_batch_or_an_occasional_slow_batch_says_nothing():
    assert watch([9744, 500, 2500, 500, 2500, 2500, 500]) == []


def test_it_says_it_again_only_after_a_quiet_spell():
    t = [0.0]
    said = []
    pace = Pace(2000, out=said.append, clock=lambda: t[0])
    for batch_id in range(1, 20):
        t[0] += 3.0
        pace.observe(progress(batch_id, 3000))
    assert len(said) == 1
    t[0] += 300
    pace.observe(progress(20, 3000))
    assert len(said) == 2


def test_no_trigger_interval_no_note():
    assert watch([5000] * 10, trigger_ms=0) == []
    assert Pace(2000).observe(None) is None
