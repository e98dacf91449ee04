"""Hand-over: a batch's claimed records go to the offload as the batch is cut, so they decode while the one before
is written.

A step of cut batches in front of the write: asked for room for the upcoming batch (before the write waits for the
batch in flight), it submits that batch's claimed records to the offload (once per batch: `Batch.pending`), then
passes the request on; a batch handed over after that (records re-read meanwhile join it) submits what was not yet
submitted the same way. The store takes the offload's answer before the batch's first write
(`vigil.kafka.steps.store.resolve`); a batch is passed on unchanged but for `pending`.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.kafka.batch import Batch
from vigil.kafka.ports import Offload
from vigil.kafka.steps.step import Roomy, Stateless


@dataclass(kw_only=True)
class HandOver(Stateless):
    offload: Offload
    next: Roomy

    def hand(self, batch: Batch) -> None:
        """The batch's claimed records to the offload (once)."""
        if batch.deferred and batch.pending is None:
            batch.pending = self.offload.submit([d[4] for d in batch.deferred])

    def make_room(self, upcoming: Batch) -> None:
        self.hand(upcoming)  # the offload decodes it while the batch before is written
        self.next.make_room(upcoming)

    def submit(self, message: Batch) -> None:
        self.hand(message)
        self.next.submit(message)
