"""Decode: each polled record becomes its events (a step in front of it may claim a record for an offload that
decodes it elsewhere: the analyzer's `vigil.analyzer.ingest.steps.claim`).

Decoding is `vigil.contract.fastwire.decode_fast` (the same decisions as the per-event pydantic path). An event the
contract rejects never reaches the writer: it becomes a dead letter naming its record, with its reason (bounded:
the first few per record, then a summary with the count), so one bad input never stalls the stream.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from vigil.contract.fastwire import decode_fast
from vigil.contract.hotkinds import Ingestable
from vigil.kafka.batch import Raw
from vigil.kafka.deadletter import DeadLetter, per_record
from vigil.kafka.stats import ConsumerStats
from vigil.kafka.steps.step import Decoded, Stateless, Step


def decode_record(value: bytes | None, topic: str, partition: int, offset: int, letters: list[DeadLetter],
                  stats: ConsumerStats) -> list[Ingestable]:
    """A record's events, decoded here; its rejected events go to `letters`, naming the record."""
    t = time.perf_counter()
    decoded = decode_fast(value)
    stats.decode_s += time.perf_counter() - t
    letters.extend(per_record(((r.reason, r.payload) for r in decoded.rejected), topic=topic,
                              partition=partition, offset=offset))  # bounded: the first K, then a summary
    return decoded.events


@dataclass(kw_only=True)
class Decode(Stateless):
    next: Step[Decoded]
    stats: ConsumerStats

    def submit(self, message: Raw) -> None:
        topic, partition, offset, _ts, value = message
        self.stats.records += 1
        letters: list[DeadLetter] = []
        self.next.submit(Decoded(message, decode_record(value, topic, partition, offset, letters, self.stats),
                                 letters))
