"""A store that refuses its first batch until told, and the consumer group's committed offsets: the commit
tests' doubles."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence

from confluent_kafka import Consumer, TopicPartition

from vigil.contract.hotkinds import Ingestable
from vigil.errors import Unreachable
from vigil.kafka.consumer import BatchId, Intent, Partition, Unstorable
from vigil.settings import VigilSettings


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


def committed(topics: VigilSettings, group: str) -> int:
    """The group's committed offsets on the steps topic, summed over its partitions (none: 0)."""
    probe = Consumer({"bootstrap.servers": str(topics.kafka_bootstrap), "group.id": group})
    try:
        got = probe.committed([TopicPartition(topics.topic("steps"), p) for p in range(topics.topic_partitions)],
                              timeout=10)
        return sum(max(0, int(tp.offset)) for tp in got)
    finally:
        probe.close()
