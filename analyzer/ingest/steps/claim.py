"""Claim: a polled record the offload takes is left to it (decoded there, at the write), any other is decoded here.

The chain's head: a record the offload claims (`Offload.claim`: the hot columnar kinds) passes straight on to the
accumulate with no events and the offload's estimate of how many it holds, so the batch's size bound still counts
them; a record it declines goes to `decode` (the kernel's `Decode`, which passes it on to the same accumulate).
Either way the record is counted once, and records keep the order they were read in.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.kafka.batch import Raw
from vigil.kafka.ports import Offload
from vigil.kafka.stats import ConsumerStats
from vigil.kafka.steps.step import Decoded, Stateless, Step


@dataclass(kw_only=True)
class Claim(Stateless):
    offload: Offload
    stats: ConsumerStats
    next: Step[Decoded]  # a claimed record: its events come from the offload (`vigil.kafka.steps.store.resolve`)
    decode: Step[Raw]  # a declined record, decoded here

    def submit(self, message: Raw) -> None:
        claimed = self.offload.claim(message[4])
        if claimed is None:
            self.decode.submit(message)
            return
        self.stats.records += 1
        self.next.submit(Decoded(message, None, [], claimed))
