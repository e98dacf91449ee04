"""The chain, listed in one place: decode -> accumulate (size/time) -> stage -> write (one in flight) -> commit.

`build` wires the steps for a consumer from what its owner gives: the writer, the dead-letter sink, the bounds.
The source (the Kafka consumer) feeds the chain's head (`decode`), polls `write` then `accumulate`, and owns what
needs the group: committing offsets, retrying a failed batch while the group is kept alive, rebalances and
re-cuts. A writer that stages (`Staging`) stages the next batch while one is written (`Stage`); a writer that
records intents (`IntentSource`) is read on assignment unless the chain has an intent step of its own.

The seam: a consumer is given a `ChainFactory`, which turns its `Ports` (what the source offers every chain: the
writer, dead-letter sink, bounds, the commit and retry it owns) into the chain. `default` is `build` over the ports;
a component lists its own steps in its own factory (the analyzer's `vigil.analyzer.ingest.chain`: its offload's
claim and hand-over, and its intent ledger; the notifier's `vigil.notify.chain`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from confluent_kafka import TopicPartition

from vigil.kafka.batch import Batch, Raw
from vigil.kafka.batchid import BatchId
from vigil.kafka.deadletter import DeadLetterSink
from vigil.kafka.ports import BatchWriter, IntentSource
from vigil.kafka.stats import ConsumerStats
from vigil.kafka.steps.accumulate import Accumulate
from vigil.kafka.steps.commit import Commit
from vigil.kafka.steps.decode import Decode
from vigil.kafka.steps.stage import Stage
from vigil.kafka.steps.step import Handler, Step, Stored
from vigil.kafka.steps.store import Store
from vigil.kafka.steps.write import Write


@dataclass(frozen=True, kw_only=True)
class Chain:
    decode: Step[Raw]  # the head: each polled record is submitted here
    accumulate: Accumulate
    write: Write
    store: Store  # the writer's step (the last handler)
    commit: Commit
    handler: Handler | None = None  # the write's first handler when the owner lists its own in front of `store`
    steps: tuple[Step[Any], ...] = ()  # the owner's other steps, closed with the rest

    def use(self, writer: BatchWriter) -> None:
        """Write to `writer` from the next batch on (its abilities taken up again)."""
        self.store.writer = writer

    def handle(self, batch: Batch, bid: BatchId) -> Stored:
        """The write's handlers, for the source's synchronous writes (a retry, a re-cut, a revocation)."""
        return (self.handler or self.store)(batch, bid)

    def intents(self) -> IntentSource | None:
        """What says which batch each partition last began to write (read on assignment): the chain's intent step
        (a handler that records them), else the writer when it does, else nothing (an uncommitted batch is simply
        read again)."""
        for part in (self.handler, self.store.writer):
            if isinstance(part, IntentSource):
                return part
        return None

    def ready(self, batch: Batch) -> None:
        """A batch the source cuts itself (a re-cut, a revocation, the last one) is readied as a cut one is (the
        steps in front of the write do their part of the hand-over); the write holds no batch in flight then."""
        self.accumulate.next.make_room(batch)

    def poll(self) -> None:
        """The due work, tail first: a written batch committed, then a full or old batch cut."""
        self.write.poll()
        self.accumulate.poll()

    def close(self) -> None:
        for step in (self.decode, *self.steps, self.accumulate, self.write, self.commit):
            step.close()


def build(*, stats: ConsumerStats, writer: BatchWriter, dead_letters: DeadLetterSink, max_events: int,
          max_s: float, commit: Callable[[list[TopicPartition]], object],
          retry: Callable[[Batch, BatchId, Exception | None], None], pipeline: bool = True) -> Chain:
    committer = Commit(commit=commit, stats=stats)
    store = Store(writer=writer, dead_letters=dead_letters, stats=stats)
    write = Write(next=committer, store=store, identify=lambda batch: batch.identity(committer.recheck),
                  retry=retry, pipeline=pipeline)
    accumulate = Accumulate(next=Stage(next=write, store=store) if pipeline else write, max_events=max_events,
                            max_s=max_s)
    return Chain(decode=Decode(next=accumulate, stats=stats), accumulate=accumulate, write=write, store=store,
                 commit=committer)


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


ChainFactory: TypeAlias = Callable[[Ports], Chain]


def default(ports: Ports) -> Chain:
    """The chain `build` lists, over the consumer's ports."""
    return build(stats=ports.stats, writer=ports.writer, dead_letters=ports.dead_letters, max_events=ports.max_events,
                 max_s=ports.max_s, commit=ports.commit, retry=ports.retry, pipeline=ports.pipeline)
