"""Re-cuts: what a consumer does with the batches an earlier owner of its partitions began to write, never committed.

A batch whose intent (its full ranges) is recorded but whose offsets were not committed may be stored, or not.
When the new owner owns every partition of it and reads from that batch's very first offsets, it re-cuts that very
batch (`Recut`: the records up to its last offsets, nothing else) and hands it over with `first_attempt` set, so the
writer makes it a no-op where the first attempt got through. Otherwise (a rebalance split it, another re-cut is
under way) its offsets are marked for re-check: the writer checks those batches' event_ids against what is stored.
One re-cut at a time; records past it are held until it is written. Pure: no Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from vigil.kafka.batchid import Intent, OffsetRange, Partition


@dataclass
class Recut:
    intent: Intent
    todo: dict[Partition, int]  # partitions of the batch still being re-read -> its last offset there
    started: float = field(default_factory=time.monotonic)

    def last(self, tp: Partition) -> int | None:
        return next((r.last for r in self.intent.ranges if (r.topic, r.partition) == tp), None)


def plan(intents: dict[Partition, Intent], committed: dict[Partition, int], owned: Iterable[Partition],
         recheck: dict[Partition, int], busy: bool) -> Recut | None:
    """The batch to re-cut (None: none, or one is under way: `busy`); the other uncommitted batches' offsets on
    `owned` partitions go to `recheck` (partition -> the last offset an earlier owner may have stored)."""
    owned = set(owned)
    pending: dict[tuple[OffsetRange, ...], Intent] = {}
    for tp, intent in intents.items():
        rng = next(r for r in intent.ranges if (r.topic, r.partition) == tp)
        if committed.get(tp, -1) <= rng.last:  # written (maybe), never committed
            pending[intent.ranges] = intent
    recut: Recut | None = None
    for intent in pending.values():
        ours = all((r.topic, r.partition) in owned and committed.get((r.topic, r.partition)) == r.first
                   for r in intent.ranges)
        if ours and recut is None and not busy:
            recut = Recut(intent=intent, todo={(r.topic, r.partition): r.last for r in intent.ranges})
        else:
            for r in intent.ranges:
                if (r.topic, r.partition) in owned:
                    recheck[(r.topic, r.partition)] = max(r.last, recheck.get((r.topic, r.partition), -1))
    return recut
