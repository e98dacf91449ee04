"""A batch with records decoded elsewhere (`Offload`): its events, in record order, are those of the batch the
consumer decodes itself, whichever records were claimed, declined or decoded here (pure: `Batch`)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from vigil.kafka.batch import Batch

pytestmark = [pytest.mark.pure]


@dataclass(frozen=True)
class Ev:
    event_id: str


class Done:
    def __init__(self, counts: list[int | None], events: list[list[Any] | None]) -> None:
        self.counts, self._events = counts, events

    def events(self) -> list[list[Any] | None]:
        return self._events


@pytest.mark.parametrize("seed", range(6))
def test_a_batch_merges_its_records_in_the_order_they_were_read(seed: int) -> None:
    rng = random.Random(seed)
    records = [[Ev(f"r{i}-e{j}") for j in range(rng.randrange(0, 4))] for i in range(rng.randrange(1, 30))]
    claimed = [rng.random() < 0.6 for _ in records]
    declined = [c and rng.random() < 0.3 for c in claimed]
    batch = Batch()
    for i, (evs, c) in enumerate(zip(records, claimed, strict=True)):
        if c:
            batch.deferred.append((len(batch.records), "t", 0, i, None))
        else:
            batch.events.extend(evs)  # type: ignore[arg-type]
            batch.records.append((len(batch.events), "t", 0, i))
    theirs = [None if d else evs for evs, c, d in zip(records, claimed, declined, strict=True) if c]
    batch.offloaded = Done([None if t is None else len(t) for t in theirs], theirs)  # type: ignore[assignment]
    batch.declined = [evs if d else None for evs, c, d in zip(records, claimed, declined, strict=True) if c]  # type: ignore[misc]
    if any(d is not None for d in batch.declined):
        batch.here = batch.merged([d or [] for d in batch.declined])
    everything, order = batch.everything()
    assert everything == [e for evs in records for e in evs]
    assert [r[3] for r in order] == list(range(len(records))), "one record each, in the order read"
    ends = [r[0] for r in order]
    assert all(e.event_id.startswith(f"r{r[3]}-") for r, s, t in zip(order, [0, *ends], ends, strict=False)
               for e in everything[s:t]), "each record's own events"
    here, _ = batch.local()
    assert here == [e for evs, c, d in zip(records, claimed, declined, strict=True) if not c or d for e in evs]
    assert batch.sources() == {e.event_id: ("t", 0, i) for i, evs in enumerate(records) for e in evs}
    batch.forget_offload()
    assert batch.local() == (batch.events, batch.records) and batch.offloaded is None and not batch.resolved
