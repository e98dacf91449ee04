"""Accumulate: decoded records gather into a batch, cut when it holds `max_events` or is `max_s` old.

Its size counts events, dead letters and the offload's estimate of what it claimed, so a batch is bounded whichever
process decodes (bounded memory). A cut hands the batch to the next step and starts a new one; while `holding` (the
consumer completes a re-cut batch) nothing is cut here: the consumer cuts it with `take`. A cut first asks the next
step to make room for the batch (backpressure), then takes it: records re-read while waiting join it. Records keep
the order they were read in; nothing is committed here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from vigil.kafka.batch import Batch
from vigil.kafka.steps.step import Decoded, Roomy


@dataclass(kw_only=True)
class Accumulate:
    next: Roomy
    max_events: int
    max_s: float
    batch: Batch = field(default_factory=Batch)
    holding: bool = False  # a re-cut batch is being completed: the consumer cuts it

    def submit(self, message: Decoded) -> None:
        raw, events, letters, estimate = message
        if letters:
            self.batch.letters.extend(letters)
        self.batch.add(raw, events, estimate)
        if not self.holding and len(self.batch) >= self.max_events:
            self._cut()  # full: what is read next starts the next batch

    def poll(self) -> None:
        """Cut the batch when it is full or old."""
        batch = self.batch
        if not self.holding and len(batch) and (len(batch) >= self.max_events
                                                or time.monotonic() - batch.started >= self.max_s):
            self._cut()

    def _cut(self) -> None:
        self.next.make_room(self.batch)  # (the batch before written and committed; a rebalance may reset ours)
        self.next.submit(self.take())

    def take(self) -> Batch:
        """The batch being cut; a new one starts."""
        batch, self.batch = self.batch, Batch()
        return batch

    def join(self) -> None:
        """Hand over what is batched, whatever its size or age."""
        if len(self.batch):
            self._cut()

    def close(self) -> None:
        self.batch = Batch()
