"""Leaving the group: a consumer that closes while joining, or after a failed write, leaves nothing behind.

Against the real embedded broker: a member closed while its join is in flight used to hold the group's
next rebalance for minutes (the next member got no partition); and the revocation of the close that
follows a fatal write failure used to write and commit the batch read after the failed one, skipping it.
"""

from __future__ import annotations

import uuid

import pytest

from tests.backbone.test_consumer_commits import committed
from tests.backbone.test_consumer_errors import FlakyWriter, Letters, consumer, send
from tests.waiting import wait_until
from vigil.contract import StepTiming
from vigil.kafka.consumer import BatchingConsumer, ConsumerFailed
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


def test_the_close_after_a_fatal_write_commits_nothing_read_after_it(topics: VigilSettings) -> None:
    for r in range(4):  # one record a send, one host: one partition, offsets 0..3, a batch per record
        producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
        producer.send([StepTiming(job_id="f", host="h0", rank=0, world_size=1, step=r * 5 + i, step_ms=1.0)
                       for i in range(5)])
        producer.flush()
    group = f"g-fatal-close-{uuid.uuid4().hex[:6]}"
    writer = FlakyWriter(KeyError("bug in a writer"), failures=1)  # the first batch fails, the rest would store
    broken = BatchingConsumer(settings=topics, bootstrap=str(topics.kafka_bootstrap), group_id=group, topics=["steps"],
                              writer=writer, dead_letters=Letters(), max_batch_events=5, max_batch_s=0.2,
                              retry_backoff_s=0.1)
    with pytest.raises(ConsumerFailed, match="bug in a writer"):
        for _ in range(600):
            broken.poll()
    read_after = len(broken._batch)  # what the consumer holds when it fails
    broken.close()  # its revocation must neither write nor commit the batch read after the failed one
    assert committed(topics, group) == 0, "the close committed past the failed batch"
    assert writer.calls == 1 and not writer.stored, f"the close wrote {len(writer.stored)} event(s) ({read_after} held)"
