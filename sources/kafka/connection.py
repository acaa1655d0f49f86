"""The executor's connection to Kafka: kafka-python's connection layer for Fetch and ListOffsets
to partition leaders (``pidquota.store.kafka.fetch_client``, so the security options apply).
One connection per Python worker process is kept between reads (and triggers) for the same
connection options; a read with other options closes it."""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pidquota.store.kafka import client_kwargs, fetch_client

MAX_RESPONSE = 128 << 20  # the largest Fetch response accepted (some brokers send more than asked)
FETCH_WAIT_MS = 100  # how long the broker may hold a Fetch when there is no data yet


class Connection:
    """kafka-python's connection layer for Fetch and ListOffsets to partition leaders."""

    def __init__(self, options: dict):
        self.options = options
        self.timeout_ms = int(options.get("requesttimeoutms", 30_000))
        self.client = fetch_client(
            options, request_timeout_ms=self.timeout_ms, receive_message_max_bytes=MAX_RESPONSE
        )
        self.client.cluster.config["allow_auto_create_topics"] = False  # a deleted topic stays deleted

    def leader(self, tp) -> int | None:
        """The partition's leader; None once fresh metadata says the partition does not exist."""
        from kafka.errors import UnknownTopicOrPartitionError

        cluster = self.client.cluster
        try:
            # done at once when the topic is known; kafka-python forgets a topic its metadata no
            # longer has, and asking for it again fails so: deleted (this raised, and the read
            # waited for its timeout, 'is the broker up?': issue 43 §3's flaky test, second cause)
            self._wait(cluster.add_topic(tp.topic))
        except UnknownTopicOrPartitionError:
            return None
        node = cluster.leader_for_partition(tp)
        if node is None or node < 0:
            try:
                self.refresh()
            except UnknownTopicOrPartitionError:
                return None  # fresh metadata says so: the topic was deleted
            node = cluster.leader_for_partition(tp)
        if node is None and tp.partition not in (cluster.partitions_for_topic(tp.topic) or ()):
            return None
        if node is None or node < 0:
            from kafka.errors import LeaderNotAvailableError

            raise LeaderNotAvailableError(f"no leader for {tp.topic}-{tp.partition}")
        return node

    def refresh(self, timeout_ms: int | None = None) -> None:
        self._wait(self.client.cluster.request_update(), timeout_ms)

    def _wait(self, future, timeout_ms: int | None = None) -> None:
        if not future.is_done:
            self.client.poll(timeout_ms=self.timeout_ms if timeout_ms is None else timeout_ms, future=future)
        if not future.is_done:
            from kafka.errors import KafkaTimeoutError

            raise KafkaTimeoutError(f"no metadata from {self.options['kafka.bootstrap.servers']}")
        if future.failed():
            raise future.exception

    def fetch(self, tp, node: int, offset: int, max_bytes: int):
        """One Fetch of one partition: its response's partition data."""
        return self.receive(self.send(tp, node, offset, max_bytes))

    def send(self, tp, node: int, offset: int, max_bytes: int):
        """Send a Fetch (read_uncommitted) of one partition now; :meth:`receive` its answer."""
        from kafka.protocol.consumer import FetchRequest

        part = FetchRequest.FetchTopic.FetchPartition(
            partition=tp.partition,
            current_leader_epoch=-1,
            fetch_offset=offset,
            log_start_offset=-1,
            partition_max_bytes=max_bytes,
        )
        request = FetchRequest(
            max_wait_ms=FETCH_WAIT_MS,
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,  # no fetch session: each request names its partition
            topics=[FetchRequest.FetchTopic(topic=tp.topic, partitions=[part])],
            forgotten_topics_data=[],
            rack_id="",
            max_version=12,  # v13+ names topics by id
        )
        self.client.await_ready(node, timeout_ms=self.timeout_ms)
        future = self.client.send(node, request)
        for _ in range(3):  # the write waits one selector round for the socket to be writable
            self.client.poll(timeout_ms=0)  # then the broker works on it while the caller decodes
        return future

    def receive(self, future):
        """The partition data of a Fetch that :meth:`send` sent."""
        if not future.is_done:
            self.client.poll(timeout_ms=self.timeout_ms + FETCH_WAIT_MS, future=future)
        if not future.is_done:
            from kafka.errors import KafkaTimeoutError

            raise KafkaTimeoutError(f"no Fetch response in {self.timeout_ms + FETCH_WAIT_MS} ms")
        if future.failed():
            raise future.exception
        return future.value.responses[0].partitions[0]

    def list_offset(self, tp, node: int, spec: int) -> int:
        """ListOffsets: -2 the log start, -1 the log end."""
        import kafka.errors as errors
        from kafka.protocol.consumer import ListOffsetsRequest

        topic = ListOffsetsRequest.ListOffsetsTopic
        part = topic.ListOffsetsPartition(
            partition_index=tp.partition, current_leader_epoch=-1, timestamp=spec
        )
        request = ListOffsetsRequest(
            replica_id=-1, isolation_level=0, topics=[topic(name=tp.topic, partitions=[part])], min_version=1
        )
        answer = (
            self.client.send_and_receive(node, request, timeout_ms=self.timeout_ms).topics[0].partitions[0]
        )
        if answer.error_code:
            raise errors.for_code(answer.error_code)(f"ListOffsets of {tp.topic}-{tp.partition}")
        return answer.offset

    def close(self) -> None:
        self.client.close()


_idle: dict[tuple, tuple[int, Connection]] = {}  # at most one: connection key -> (pid, connection)
_idle_lock = threading.Lock()


def _key(options: dict) -> tuple:
    kwargs = client_kwargs(options)
    return (*sorted((k, str(v)) for k, v in kwargs.items()), options.get("requesttimeoutms", ""))


@contextmanager
def lease(options: dict) -> Iterator[Connection]:
    """A connection for these options: the idle one of this process if it has the same
    options, else a new one (the idle one, for other options, is closed). Handed back
    idle after a clean read; closed after an error."""
    key = _key(options)
    with _idle_lock:
        pid, conn = _idle.pop(key, (None, None))
        stale = list(_idle.values())
        _idle.clear()
    for owner, other in stale:
        if owner == os.getpid():  # a forked child must not close its parent's sockets
            other.close()
    if conn is None or pid != os.getpid():
        conn = Connection(options)
    try:
        yield conn
    except BaseException:
        conn.close()
        raise
    with _idle_lock:
        extra = _idle.get(key)  # a concurrent read handed one back first
        if extra is None:
            _idle[key] = (os.getpid(), conn)
    if extra is not None:
        conn.close()


@atexit.register
def close_idle() -> None:
    """Close the idle connection (at exit, and in tests)."""
    with _idle_lock:
        idle = list(_idle.values())
        _idle.clear()
    for owner, conn in idle:
        if owner == os.getpid():
            conn.close()
