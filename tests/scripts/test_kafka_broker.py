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
