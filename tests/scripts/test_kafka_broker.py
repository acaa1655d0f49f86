"""scripts/kafka_broker.py's choices that need no broker: the ports a cluster is given."""

import kafka_broker  # scripts/ is on the path (tests/conftest.py)


def test_every_port_of_a_cluster_is_its_own(tmp_path):
    """A node's four listeners (PLAINTEXT, SASL, CONTROLLER, JMX), and every node's, on distinct
    ports: chosen one at a time, a node once got its PLAINTEXT and CONTROLLER listeners on one
    port, and its storage format refused the configuration (the session's broker never started)."""
    for k in range(50):
        cluster = kafka_broker.Cluster(tmp_path / str(k), size=3, kafka_version="4.1.1")
        ports = [p for n in cluster.nodes for p in (n.port, n.sasl_port, n.controller_port, n.jmx_port)]
        assert len(set(ports)) == len(ports) == 12 and all(ports)
        props = cluster.properties(cluster.nodes[0])
        assert props["listeners"].count(str(cluster.nodes[0].port)) == 1


def test_a_benchmarks_jvm_options_come_after_the_compiler_choice(tmp_path):
    """``plugin_sensing.py --jit-scale``: the option reaches the JVM's command line, after the
    compilers chosen (C1 alone by default, both for a cost benchmark), before the main class."""
    plain = kafka_broker.java_cmd(tmp_path, "kafka.Kafka", java="java")
    cmd = kafka_broker.java_cmd(
        tmp_path, "kafka.Kafka", java="java", options=("-XX:CompileThresholdScaling=0.05",)
    )
    assert "-XX:CompileThresholdScaling=0.05" not in plain
    at = cmd.index("-XX:CompileThresholdScaling=0.05")
    assert cmd.index("-XX:TieredStopAtLevel=1") < at < cmd.index("kafka.Kafka")
    both = kafka_broker.java_cmd(tmp_path, "kafka.Kafka", java="java", c2=True, options=("-Dx=1",))
    assert "-XX:TieredStopAtLevel=1" not in both and "-Dx=1" in both
    cluster = kafka_broker.Cluster(tmp_path / "c", jvm_options=("-Dy=2",), kafka_version="4.1.1")
    assert cluster.jvm_options == ("-Dy=2",)
