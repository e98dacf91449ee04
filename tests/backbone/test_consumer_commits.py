"""Commits: an offset is committed only once every record before it on its partition is written.

Against the real broker: a batch whose write keeps failing (transiently) is being retried when a
second member joins the group. The rebalance must not commit the batch read after the failing one
(that would skip the failing one for good if the process died next); once the store is back, every
event is stored exactly once and the group's commit reaches the end.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.waiting import wait_until
from vigil.contract import StepTiming
from vigil.contract.hotkinds import Ingestable
from vigil.errors import Unreachable
from vigil.kafka.consumer import BatchId, BatchingConsumer, Intent, Partition, Unstorable
from vigil.kafka.deadletter import DeadLetter
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.chaos]

RECORDS, PER_RECORD = 6, 5


class FirstBatchDown:
    """Until `up` is set, the store refuses (transiently) every batch holding an event of the first batch it
    saw (that batch again, or a re-read cut otherwise); the others it stores."""

    def __init__(self) -> None:
        self.up = threading.Event()
        self.first: set[str] = set()
        self.refused = 0
        self.writes: Counter[str] = Counter()

    def write(self, events: Sequence[Ingestable], batch: BatchId) -> list[Unstorable]:
        ids = {e.event_id for e in events}
        self.first = self.first or ids
        if ids & self.first and not self.up.is_set():
            self.refused += 1
            raise Unreachable("ClickHouse: Connection refused")
        self.writes.update(e.event_id for e in events)
        return []

    def intents(self, partitions: Sequence[Partition]) -> dict[Partition, Intent]:
        return {}


class Letters:
    def write(self, letters: Sequence[DeadLetter]) -> None:
        pass


def committed(topics: VigilSettings, group: str) -> int:
    """The group's committed offsets on the steps topic, summed over its partitions (none: 0)."""
    probe = Consumer({"bootstrap.servers": str(topics.kafka_bootstrap), "group.id": group})
    try:
        got = probe.committed([TopicPartition(topics.topic("steps"), p) for p in range(topics.topic_partitions)],
                              timeout=10)
        return sum(max(0, int(tp.offset)) for tp in got)
    finally:
        probe.close()


def test_a_rebalance_during_a_retried_write_commits_nothing_past_it(topics: VigilSettings) -> None:
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    for r in range(RECORDS):  # a record per send, all on one partition (one host, one key), offsets from 0
        producer.send([StepTiming(job_id="c", host="h0", rank=0, world_size=1, step=r * PER_RECORD + i, step_ms=1.0)
                       for i in range(PER_RECORD)])
    producer.flush()
    group = f"g-commits-{uuid.uuid4().hex[:6]}"
    writer = FirstBatchDown()
    ingest = BatchingConsumer(settings=topics, bootstrap=str(topics.kafka_bootstrap), group_id=group, topics=["steps"],
                              writer=writer, dead_letters=Letters(), max_batch_events=PER_RECORD, max_batch_s=0.2,
                              retry_backoff_s=0.1, max_backoff_s=0.3)
    stop, left = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            while not stop.is_set():
                ingest.poll(stop=stop)
        except BaseException as exc:
            errors.append(exc)

    rebalanced = threading.Event()

    def other_member() -> None:
        def assigned(_c: Any, _parts: list[TopicPartition]) -> None:
            rebalanced.set()

        member = Consumer({"bootstrap.servers": str(topics.kafka_bootstrap), "group.id": group,
                           "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        member.subscribe([topics.topic("steps")], on_assign=assigned)
        while not left.is_set():
            member.consume(10, timeout=0.2)  # takes part in the group; commits nothing
        member.close()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    joiner = threading.Thread(target=other_member, daemon=True)
    try:
        wait_until(lambda: writer.refused >= 2 and ingest.stats.state == "retrying", 60,
                   "the first batch's write failing and retried")
        joiner.start()
        wait_until(rebalanced.is_set, 60, "the group rebalanced with a second member")
        assert committed(topics, group) == 0, "nothing committed past the batch that is not written"
        assert not writer.writes, "the batch after the unwritten one is not stored by the rebalance either"
        writer.up.set()
        left.set()
        joiner.join(30)
        wait_until(lambda: committed(topics, group) >= RECORDS, 90, "every record written and committed")
    finally:
        left.set()
        stop.set()
        worker.join(30)
        ingest.close()
    assert not errors, errors
    assert len(writer.writes) == RECORDS * PER_RECORD and set(writer.writes.values()) == {1}, "each event once"
