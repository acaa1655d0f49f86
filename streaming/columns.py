"""Row kinds and column names of what the query parses and writes, defined once. Spark-free,
so the output reader, the report and the start-up checks use them without a JVM (the Spark
schemas built from them are in ``pidquota.streaming.schema``)."""

from __future__ import annotations

from pidquota.formats.folded import KIND_DEAD
from pidquota.quota.client import COLUMNS as CLIENT_FIELDS

KIND_DECISION, KIND_METRIC = "decision", "metric"  # rows coming out of the operator
KIND_SKIPPED = "skipped"  # input lines of no interest, counted per kind (the request log's other API keys)

# The stateful operator's input is folded per principal (streaming/compact.py). A
# dead letter is the group with the empty principal (a valid principal is never
# empty) and carries its raw text, reason and source as one JSON string.
DEAD_PRINCIPAL = ""

# Which application a PID came from, where the input says (``pidquota.quota.client``).
CLIENT_COLUMNS = CLIENT_FIELDS
DECISION_COLUMNS = (
    "principal",
    "producer_id",
    "producer_epoch",
    "timestamp",
    "verdict",
    "throttle_time_ms",
    "tokens",
    "quota",
    "replay",
    "mode",
    *CLIENT_COLUMNS,
)
METRIC_COLUMNS = (
    "principal",
    "timestamp",
    "quota",
    "rate",
    "tokens",
    "throttle_time_ms",
    "events",
    "admitted",
    "throttled",
    "passed",
    "ignored",
    "admitted_total",
    "throttled_total",
    "active_pids_estimate",
    "state_bytes",
    "layers",
    "quota_stale",
    "failed_publishes",
    "replay",
    "mode",
    # the batch's main client: of its throttled PIDs, else of its admitted ones
    *CLIENT_COLUMNS,
)
# The decision columns the operator carries (``d_`` + name) on a principal's row, one element
# per verdict (``streaming/outputs/rows.py`` makes them decision rows). Each but ``client`` is
# packed: the principal's verdicts as one binary value, a numpy array's bytes of the dtype in
# ``PACKED`` (little-endian). A list per row cost PySpark a Python object per verdict on the way
# out of the operator, and the JVM an array element each way: packed, the flood's operator
# and collect ran 40-180 ms a batch of 100k verdicts faster (docs/benchmarks.md). Example: verdicts
# of PIDs 7 and 8 give ``d_producer_id`` = the 16 bytes of ``np.array([7, 8], "<i8")``.
# ``client`` is each verdict's PID's client identity joined into one string (``SEP``), an
# array of strings, or null when none of its verdicts' PIDs named a client.
DECISION_FIELDS = (
    "producer_id",
    "producer_epoch",
    "timestamp",
    "admitted",
    "throttle_time_ms",
    "tokens",
    "client",
)
DECISION_ARRAYS = {name: f"d_{name}" for name in DECISION_FIELDS}  # field -> the operator's column
PACKED = {
    "producer_id": "<i8",
    "producer_epoch": "<i4",
    "timestamp": "<i8",
    "admitted": "|b1",
    "throttle_time_ms": "<i8",
    "tokens": "<f8",
}  # a packed decision column's dtype
# On the metrics row of a principal with no quota (no verdicts, so no decision's address):
# its batch's distinct client addresses, when the actuator acts by address. The address book
# (``actuate/addresses.py``) then knows every principal's addresses, not only the limited ones',
# so a connection rate never lands on an address an unlimited principal uses. An operator
# column, never an output one.
SEEN_ADDRESSES = "seen_addresses"
DEAD_LETTER_COLUMNS = ("raw", "reason", "source")
SKIPPED_COLUMNS = ("what", "count")
# The actuator's rows (``pidquota.actuate.actuator.Action``, and the batch that led to them),
# appended to OUTPUT/actions/ by the sink; not a kind of the operator's rows.
ACTIONS = "actions"
ACTION_COLUMNS = (
    "at_ms",
    "principal",
    "action",
    "control",
    "before",
    "value",
    "until_ms",
    "dry_run",
    "note",
    "batch_id",
)
# The principal Kafka gives every client of a listener that authenticates no one (PLAINTEXT, or
# SSL without client certificates): one quota would cover all of them.
ANONYMOUS = "User:ANONYMOUS"

# Each output: its name (folder, Kafka option), the row kind it takes, its columns.
OUTPUTS = {
    "decisions": (KIND_DECISION, DECISION_COLUMNS),
    "metrics": (KIND_METRIC, METRIC_COLUMNS),
    "dead-letters": (KIND_DEAD, DEAD_LETTER_COLUMNS),
    "skipped": (KIND_SKIPPED, SKIPPED_COLUMNS),
}
