"""The chain, listed in one place: decode -> accumulate (size/time) -> write (the handler, one in flight) -> commit.

`build` wires the steps for a consumer from what its owner gives: the writer (its optional abilities, `Staging` and
an `Offload` for an `OffloadWriter`, are taken up here), the dead-letter sink, the bounds. The source (the Kafka
consumer) feeds `decode`, polls `write` then `accumulate`, and owns what needs the group: committing offsets,
retrying a failed batch while the group is kept alive, rebalances and re-cuts.

The seam: a consumer is given a `ChainFactory`, which turns its `Ports` (what the source offers every chain: the
writer, dead-letter sink, bounds, the commit and retry it owns) into the chain. `default` is `build` over the ports;
a component lists its own steps in its own factory (the analyzer's `vigil.analyzer.ingest.chain`, the notifier's
`vigil.notify.chain`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

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


@dataclass(frozen=True, kw_only=True)
class Ports:
    """What the consumer (the source) offers the chain it feeds: a factory wires its steps to these."""

    stats: ConsumerStats
    writer: BatchWriter
    dead_letters: DeadLetterSink
    max_events: int
    max_s: float
    commit: Callable[[list[TopicPartition]], object]  # offsets, committed synchronously
    retry: Callable[[Batch, BatchId, Exception | None], None]  # a failed write retried while the group is kept alive
    pipeline: bool = True
    offload: Offload | None = None  # the consumer's option (the default chain's decode offload)


ChainFactory: TypeAlias = Callable[[Ports], Chain]


def default(ports: Ports) -> Chain:
    """The chain `build` lists, over the consumer's ports (its offload option included)."""
    return build(stats=ports.stats, writer=ports.writer, dead_letters=ports.dead_letters, max_events=ports.max_events,
                 max_s=ports.max_s, commit=ports.commit, retry=ports.retry, offload=ports.offload,
                 pipeline=ports.pipeline)
