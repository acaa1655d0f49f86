"""Real clients (traffic/clients.py, `pidquota clients`) against Apache Kafka: each
restart of a crash loop is granted a new producer id, a steady producer keeps one."""

from pidquota.store.kafka import producer
from pidquota.traffic import clients


def test_a_crash_loop_gets_a_new_pid_each_restart_and_a_steady_producer_one(kafka):
    options = {"kafka.bootstrap.servers": kafka.bootstrap}
    kafka.produce("clients", [], partitions=1)

    def make():
        return producer(options, linger_ms=0)

    loop = clients.crash_loop(make, "clients", restarts=4, records=2)
    assert loop.records == 8 and len(set(loop.pids)) == 4
    steady = clients.steady(make, "clients", batches=3, records=2)
    assert steady.records == 6 and len(steady.pids) == 1 and steady.pids[0] not in loop.pids
    assert len(kafka.consume("clients")) == 14
