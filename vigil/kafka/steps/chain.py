"""The chain, listed in one place: decode -> accumulate (size/time) -> write (the handler, one in flight) -> commit.

`build` wires the steps for a consumer from what its owner gives: the writer (its optional abilities, `Staging` and
an `Offload` for an `OffloadWriter`, are taken up here), the dead-letter sink, the bounds. The source (the Kafka
consumer) feeds `decode`, polls `write` then `accumulate`, and owns what needs the group: committing offsets,
retrying a failed batch while the group is kept alive, rebalances and re-cuts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import TopicPartition

from vigil.kafka.batch import Batch
from vigil.kafka.batchid import BatchId
from vigil.kafka.deadletter import DeadLetterSink
from vigil.kafka.ports import BatchWriter, Offload, Staging
from vigil.kafka.stats import ConsumerStats
from vigil.kafka.steps.accumulate import Accumulate
from vigil.kafka.steps.commit import Commit
from vigil.kafka.steps.decode import Decode
from vigil.kafka.steps.store import Store
from vigil.kafka.steps.write import Write


@dataclass(frozen=True, kw_only=True)
class Chain:
    decode: Decode
    accumulate: Accumulate
    write: Write
    store: Store  # the handler, for the source's synchronous writes (a retry, a re-cut, a revocation)
    commit: Commit

    def use(self, writer: BatchWriter) -> None:
        """Write to `writer` from the next batch on (its abilities taken up again)."""
        self.store.writer = writer
        self.write.staging = writer if self.write.pipeline and isinstance(writer, Staging) else None

    def poll(self) -> None:
        """The due work, tail first: a written batch committed, then a full or old batch cut."""
        self.write.poll()
        self.accumulate.poll()

    def close(self) -> None:
        for step in (self.decode, self.accumulate, self.write, self.commit):
            step.close()


def build(*, stats: ConsumerStats, writer: BatchWriter, dead_letters: DeadLetterSink, max_events: int,
          max_s: float, commit: Callable[[list[TopicPartition]], object],
          retry: Callable[[Batch, BatchId, Exception | None], None],
          offload: Offload | None = None, pipeline: bool = True) -> Chain:
    committer = Commit(commit=commit, stats=stats)
    store = Store(writer=writer, dead_letters=dead_letters, stats=stats)
    write = Write(next=committer, store=store, identify=lambda batch: batch.identity(committer.recheck),
                  retry=retry, offload=offload, pipeline=pipeline,
                  staging=writer if pipeline and isinstance(writer, Staging) else None)
    accumulate = Accumulate(next=write, max_events=max_events, max_s=max_s)
    return Chain(decode=Decode(next=accumulate, stats=stats, offload=offload), accumulate=accumulate, write=write,
                 store=store, commit=committer)
