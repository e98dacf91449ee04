"""Commits: an offset is committed only once every record before it on its partition is written.

Against the real broker: a batch whose write keeps failing (transiently) is being retried when a
second member joins the group. The rebalance must not commit the batch read after the failing one
(that would skip the failing one for good if the process died next); once the store is back, every
event is stored exactly once and the group's commit reaches the end.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.commit_doubles import FirstBatchDown, committed
from tests.support.waiting import wait_until
from vigil.contract import StepTiming
from vigil.kafka.consumer import BatchingConsumer
from vigil.kafka.deadletter import DeadLetter
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.chaos]

RECORDS, PER_RECORD = 6, 5


class Letters:
    def write(self, letters: Sequence[DeadLetter]) -> None:
        pass


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
