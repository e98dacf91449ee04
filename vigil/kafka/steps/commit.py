"""Commit: a written batch's offsets are committed, in the order batches were cut, each for its own ranges only.

An offset is committed only after every record before it on its partition is written or dead-lettered (at least
once: a crash before the commit re-reads, the writer's token makes that a no-op). Once `stopped` (a batch was left
unwritten at a stop, or the consumer failed) nothing more is committed: the next owner reads from the last commit.
A commit also clears the re-check marks (`recheck`: partition -> last offset an earlier owner may have stored) it
passed, and counts the batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import TopicPartition

from vigil.kafka.batchid import Partition
from vigil.kafka.stats import ConsumerStats
from vigil.kafka.steps.step import Stateless, Stored


@dataclass(kw_only=True)
class Commit(Stateless):
    commit: Callable[[list[TopicPartition]], object]  # synchronous; raises when the broker did not take it
    stats: ConsumerStats
    recheck: dict[Partition, int] = field(default_factory=dict)
    stopped: bool = False

    def submit(self, message: Stored) -> None:
        if self.stopped:  # an earlier batch was left unwritten at a stop: the next owner reads from its offsets
            return
        bid, stored, letters = message
        offsets = [TopicPartition(r.topic, r.partition, r.last + 1) for r in bid.ranges]
        t = time.perf_counter()
        if offsets:
            self.commit(offsets)
        self.stats.commit_s += time.perf_counter() - t
        for r in bid.ranges:  # offsets past an earlier owner's uncommitted batch need no re-check
            if self.recheck.get((r.topic, r.partition), -1) <= r.last:
                self.recheck.pop((r.topic, r.partition), None)
        self.stats.events += stored
        self.stats.rejected += sum(letter.count for letter in letters)
        self.stats.batches += 1
        self.stats.replayed_batches += bid.first_attempt is not None
        self.stats.rechecked_batches += bid.recheck
        self.stats.last_commit_ts = time.time()
        self.stats.state = "running"
