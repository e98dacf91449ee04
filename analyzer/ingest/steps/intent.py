"""Intent: a batch's intent (its full ranges) is recorded in the ledger before its first write; read on assignment.

A handler on the write's thread in front of the store (`vigil.kafka.steps.step.Handler`, the shape of the steps that
run there: called with the batch and its id, they hand it on by calling the next and return what it stored, which
`Write` passes to the commit on the consumer's thread): a batch gets its intent
recorded once per `BatchId` (a retry of the same batch records nothing more; a re-cut batch, `first_attempt` set,
has its intent already), then is handed to the next handler. A failed record raises like a failed write (the
consumer retries it, the batch not yet written). On assignment the consumer reads the latest intent of each
partition here (`intents`, an `IntentSource`) to re-cut or re-check what an earlier owner left uncommitted.
The ledger is `vigil.analyzer.ingest.intents.IntentLedger`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from vigil.kafka.batch import Batch
from vigil.kafka.batchid import BatchId, Intent, Partition
from vigil.kafka.steps.step import Handler, Stored


class Ledger(Protocol):
    def record(self, batch: BatchId) -> datetime: ...

    def latest(self, partitions: Sequence[Partition]) -> dict[Partition, Intent]: ...


@dataclass(kw_only=True)
class RecordIntent:
    ledger: Ledger
    next: Handler
    seconds: dict[str, float] | None = None  # time spent recording, added under "intent" (the writer's timings)
    recorded: str = ""  # the token of the last batch recorded

    def __call__(self, batch: Batch, bid: BatchId) -> Stored:
        if bid.first_attempt is None and self.recorded != bid.token:
            t = time.perf_counter()
            self.ledger.record(bid)
            self.recorded = bid.token
            if self.seconds is not None:
                self.seconds["intent"] = self.seconds.get("intent", 0.0) + time.perf_counter() - t
        return self.next(batch, bid)

    def intents(self, partitions: Sequence[Partition]) -> dict[Partition, Intent]:
        """The latest intent recorded for each of `partitions` (absent: none)."""
        return self.ledger.latest(partitions)
