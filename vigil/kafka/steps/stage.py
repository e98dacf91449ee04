"""Stage: while a batch is written, the next one is staged by its writer on the consumer's thread (`Staging`).

A step of cut batches in front of `Write`: asked for room for the upcoming batch while the write is `busy`, it has
the store's writer stage that batch's events (when the writer stages: checked at each batch, so a writer swapped
after the start is the one asked) before the write waits for the batch in flight; a batch goes on unchanged. With
no write thread there is nothing to overlap: a chain without `pipeline` lists no `Stage`.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.kafka.batch import Batch
from vigil.kafka.ports import Staging
from vigil.kafka.steps.step import Pipelined, Stateless
from vigil.kafka.steps.store import Store


@dataclass(kw_only=True)
class Stage(Stateless):
    next: Pipelined
    store: Store  # its writer stages (`Staging`), or nothing is staged

    def make_room(self, upcoming: Batch) -> None:
        writer = self.store.writer
        if self.next.busy and isinstance(writer, Staging):
            writer.stage(upcoming.events)  # while the batch before is written
        self.next.make_room(upcoming)

    def submit(self, message: Batch) -> None:
        self.next.submit(message)
