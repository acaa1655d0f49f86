"""The operator's view of a run: Prometheus metrics, the live table, the pace line, the report.

Spark-free: everything here reads a batch's rows, Spark's progress or a run's output folder."""
