"""Lag is measured against each partition's true end, through the real broker.

Records are produced in batches of several records (the embedded broker's ListOffsets(latest)
then answers the last batch's base offset plus one, below the end); a group commits part of the
log. `LagProbe` must count every uncommitted record, and read 0 and advance the ingest frontier
only once the group has committed the last one. On a real Kafka the listed end is the true end
and the same assertions hold.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from vigil.kafka.admin import client_config
from vigil.kafka.ends import confirmed_ends
from vigil.kafka.lag import LagProbe
from vigil.settings import VigilSettings

pytestmark = pytest.mark.kafka
BATCHES, PER_BATCH = 3, 10


def produce_batches(settings: VigilSettings, topic: str) -> int:
    producer = Producer({**client_config(settings, str(settings.kafka_bootstrap)), "linger.ms": 50})
    for b in range(BATCHES):
        for i in range(PER_BATCH):
            producer.produce(topic, value=b"r%d-%d" % (b, i), partition=0)
        assert producer.flush(30) == 0  # one record batch of PER_BATCH records
    return BATCHES * PER_BATCH


def commit(settings: VigilSettings, group: str, topic: str, offset: int) -> None:
    c = Consumer({**client_config(settings, str(settings.kafka_bootstrap)), "group.id": group,
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def test_lag_counts_every_uncommitted_record_and_reads_zero_only_at_the_true_end(topics: VigilSettings) -> None:
    topic, group = topics.topic("steps"), f"g-{uuid.uuid4().hex[:8]}"
    end = produce_batches(topics, topic)
    assert confirmed_ends(topics, str(topics.kafka_bootstrap), {(topic, 0): 0, (topic, 1): 0}) == {
        (topic, 0): end, (topic, 1): 0}  # from any lower bound, an empty partition included
    probe = LagProbe(settings=topics, bootstrap=str(topics.kafka_bootstrap), group_id=group, topics=["steps"])

    commit(topics, group, topic, end - PER_BATCH - 3)  # inside the second batch: the last batch and 3 more unread
    assert probe.sample() == {topic: PER_BATCH + 3}
    assert probe.frontier is None  # nothing is stored up to any end yet

    commit(topics, group, topic, end - 1)  # one record short: not caught up
    assert probe.sample() == {topic: 1}
    assert probe.frontier is None

    commit(topics, group, topic, end)
    assert probe.sample() == {topic: 0}
    assert probe.frontier is not None  # everything produced before the samples is now stored
