"""The actuator: pidquota's decisions acted on through Kafka's own controls (client
quotas, ACLs), recorded in a journal that outlives pidquota, and undone exactly."""
