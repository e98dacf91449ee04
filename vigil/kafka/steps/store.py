"""Store: the handler's step. A cut batch and its dead letters are written durably; nothing is committed here.

Before its first write a batch takes the offload's answer (`resolve`): what the offload declined (or all it
claimed, when it failed) is decoded here, its rejected events dead letters. The writer is handed the batch with its
`BatchId` (an `OffloadWriter` the offload's answer as it is); an event it can never store comes back and becomes a
dead letter naming its record, so one bad value never stalls the stream. A failure raises: the caller retries the
same batch under the same id (a no-op where it got through) or stops. `OffloadLost` drops the offload's answer
first, so the retry decodes every record here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vigil.contract.fastwire import payload_of
from vigil.kafka.batch import Batch
from vigil.kafka.batchid import BatchId, Unstorable
from vigil.kafka.deadletter import DeadLetter, DeadLetterSink
from vigil.kafka.failures import OffloadLost
from vigil.kafka.ports import BatchWriter, OffloadWriter
from vigil.kafka.stats import ConsumerStats
from vigil.kafka.steps.decode import decode_record
from vigil.kafka.steps.step import Stored


def resolve(batch: Batch, stats: ConsumerStats) -> None:
    """Once per batch, before its first write: the offload's answer; the records it declined (or all of them,
    when it failed) decoded here, their rejected events dead letters."""
    if batch.resolved:
        return
    if not batch.deferred:
        batch.resolved = True
        return
    if batch.own_letters is None:
        batch.own_letters = len(batch.letters)
    del batch.letters[batch.own_letters:]  # a resolve that raised half-way starts again
    result = batch.pending.result() if batch.pending is not None else None
    counts = list(result.counts) if result is not None else []
    counts += [None] * (len(batch.deferred) - len(counts))  # records added after the hand-over: decoded here
    batch.declined = [None if count is not None else decode_record(value, topic, partition, offset, batch.letters,
                                                                   stats)
                      for (_at, topic, partition, offset, value), count in zip(batch.deferred, counts, strict=True)]
    batch.offloaded = result if result is not None and any(c is not None for c in counts) else None
    if any(d is not None for d in batch.declined):
        batch.here = batch.merged([d or [] for d in batch.declined])
    batch.resolved = True


@dataclass(kw_only=True)
class Store:
    writer: BatchWriter
    dead_letters: DeadLetterSink
    stats: ConsumerStats

    def __call__(self, batch: Batch, bid: BatchId) -> Stored:
        """Write the batch and its dead letters (on the writer thread when pipelined); nothing is committed."""
        resolve(batch, self.stats)
        letters = list(batch.letters)
        events, _records = batch.local()
        offloaded = batch.offloaded
        stored = len(events) + (sum(c for c in offloaded.counts if c is not None) if offloaded is not None else 0)
        if stored:
            if offloaded is not None and isinstance(self.writer, OffloadWriter):
                try:
                    bads: Sequence[Unstorable] = self.writer.write_offloaded(events, offloaded,
                                                                             lambda: batch.everything()[0], bid)
                except OffloadLost:
                    batch.forget_offload()  # the retry decodes every record here
                    raise
            else:
                bads = self.writer.write(batch.everything()[0], bid)
            sources = batch.sources() if bads else {}
            for bad in bads:
                topic, partition, offset = sources.get(bad.event.event_id, ("", -1, -1))
                letters.append(DeadLetter(reason=bad.reason, topic=topic, partition=partition, offset=offset,
                                          payload=payload_of(bad.event)))
                stored -= 1
        self.dead_letters.write(letters)
        return Stored(bid, stored, letters)
