"""A flaky store, a dead-letter sink and a consumer on the test's topics: the consumer error tests' doubles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vigil.contract import StepTiming
from vigil.contract.hotkinds import Ingestable
from vigil.kafka.consumer import BatchId, BatchingConsumer, Intent, Partition, Unstorable
from vigil.kafka.deadletter import DeadLetter
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings


class FlakyWriter:
    """Fails the first `failures` writes with `error`, then stores in memory."""

    def __init__(self, error: Exception, failures: int) -> None:
        self.error, self.failures, self.calls = error, failures, 0
        self.stored: dict[str, Ingestable] = {}
        self.tokens: list[str] = []

    def write(self, events: Sequence[Ingestable], batch: BatchId) -> list[Unstorable]:
        self.calls += 1
        self.tokens.append(batch.token)
        if self.calls <= self.failures:
            raise self.error
        self.stored.update({e.event_id: e for e in events})
        return []

    def intents(self, partitions: Sequence[Partition]) -> dict[Partition, Intent]:
        return {}


class Letters:
    def write(self, letters: Sequence[DeadLetter]) -> None:
        pass


def consumer(topics: VigilSettings, writer: Any, group: str) -> BatchingConsumer:
    return BatchingConsumer(settings=topics, bootstrap=str(topics.kafka_bootstrap), group_id=group, topics=["steps"],
                            writer=writer, dead_letters=Letters(), max_batch_s=0.2, retry_backoff_s=0.1)


def send(topics: VigilSettings, n: int) -> None:
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    producer.send([StepTiming(job_id="e", host="h0", rank=0, world_size=1, step=i, step_ms=1.0) for i in range(n)])
    producer.flush()
