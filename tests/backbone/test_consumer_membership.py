"""Leaving the group: a consumer that closes while joining, or after a failed write, leaves nothing behind.

Against the real embedded broker: a member closed while its join is in flight used to hold the group's
next rebalance for minutes (the next member got no partition); and the revocation of the close that
follows a fatal write failure used to write and commit the batch read after the failed one, skipping it.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence

import pytest
from confluent_kafka import Consumer

from tests.support.commit_doubles import committed
from tests.support.consumer_doubles import FlakyWriter, Letters, consumer, send
from tests.support.waiting import wait_until
from vigil.contract import StepTiming
from vigil.contract.hotkinds import Ingestable
from vigil.kafka.consumer import BatchId, BatchingConsumer, ConsumerFailed, Unstorable
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka]


def test_a_consumer_closed_while_joining_leaves_the_group_to_the_next_member(topics: VigilSettings) -> None:
    group = f"g-join-{uuid.uuid4().hex[:6]}"
    early = consumer(topics, FlakyWriter(KeyError("never"), failures=0), group)
    for _ in range(5):  # a service stopped during its start: it polled for about a second, its join in flight
        early.poll()
    assert not early._consumer.assignment(), "joined already: the test would not close it mid-join"
    early.close()
    send(topics, 30)
    writer = FlakyWriter(KeyError("never"), failures=0)
    later = consumer(topics, writer, group)
    try:  # before the fix the embedded broker gave it no partition for minutes (bound: the rebalance timeout)
        wait_until(lambda: later.poll() is None and len(writer.stored) == 30, 45, "the next member to read the topic")
    finally:
        later.close()
    assert committed(topics, group) > 0


class FailsOnce(FlakyWriter):
    """Its first write fails with a bug (not transient) once `ready()` holds; the later ones store."""

    def __init__(self, ready: Callable[[], bool]) -> None:
        super().__init__(KeyError("bug in a writer"), failures=1)
        self.ready = ready
        self.started = threading.Event()

    def write(self, events: Sequence[Ingestable], batch: BatchId) -> list[Unstorable]:
        self.started.set()
        if self.calls == 0:
            wait_until(self.ready, 30, "the consumer to be where the test needs the failure")
        return super().write(events, batch)


def records(topics: VigilSettings, job: str, first: int = 0, n: int = 4) -> None:
    for r in range(first, first + n):  # one record a send, one host: one partition, a batch per record
        producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
        producer.send([StepTiming(job_id=job, host="h0", rank=0, world_size=1, step=r * 5 + i, step_ms=1.0)
                       for i in range(5)])
        producer.flush()


def batching(topics: VigilSettings, writer: FlakyWriter, group: str) -> BatchingConsumer:
    return BatchingConsumer(settings=topics, bootstrap=str(topics.kafka_bootstrap), group_id=group, topics=["steps"],
                            writer=writer, dead_letters=Letters(), max_batch_events=5, max_batch_s=0.2,
                            retry_backoff_s=0.1)


def test_the_close_after_a_fatal_write_commits_nothing_read_after_it(topics: VigilSettings) -> None:
    records(topics, "f")
    group = f"g-fatal-close-{uuid.uuid4().hex[:6]}"
    holder: list[BatchingConsumer] = []
    writer = FailsOnce(ready=lambda: len(holder[0]._batch) > 0)  # fails once the next batch is being read
    broken = batching(topics, writer, group)
    holder.append(broken)
    with pytest.raises(ConsumerFailed, match="bug in a writer"):
        for _ in range(600):
            broken.poll()
    read_after = len(broken._batch)
    broken.close()  # its revocation must neither write nor commit the batch read after the failed one
    assert read_after > 0, "nothing was read after the failed batch: the test proves nothing"
    assert committed(topics, group) == 0, "the close committed past the failed batch"
    assert writer.calls == 1 and not writer.stored, f"the close wrote {len(writer.stored)} event(s)"


def test_a_failure_a_rebalance_catches_leaves_the_consumer_committing(topics: VigilSettings) -> None:
    """A batch whose write fails (not transiently) while a rebalance revokes its partitions is left to their next
    owner; the consumer that got them back goes on writing and committing (it is not stopped)."""
    records(topics, "r", n=1)  # one batch: nothing is handed over while it is in flight
    group = f"g-revoked-{uuid.uuid4().hex[:6]}"
    holder: list[BatchingConsumer] = []
    writer = FailsOnce(ready=lambda: holder[0].stats.rebalances > 0)  # fails inside the revocation's wait for it
    ingest = batching(topics, writer, group)
    holder.append(ingest)
    wait_until(lambda: ingest.poll() is None and writer.started.is_set(), 60, "the first batch in flight")
    other = Consumer({"bootstrap.servers": str(topics.kafka_bootstrap), "group.id": group, "enable.auto.commit": False,
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    other.subscribe([topics.topic("steps")])  # joins: the group rebalances, the first member's partitions revoked
    try:
        wait_until(lambda: ingest.poll() is None and other.poll(0.1) is None and writer.calls >= 1, 60,
                   "the failure inside the revocation")
    finally:
        other.close()
    records(topics, "r", first=1, n=3)
    wait_until(lambda: ingest.poll() is None and len(writer.stored) == 20, 90, "every event stored after the rebalance")
    wait_until(lambda: ingest.poll() is None and committed(topics, group) == 4, 60, "the commit at the log's end")
    assert ingest.stats.state == "running"
    ingest.close()
