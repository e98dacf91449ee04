"""A batch's work that needs nothing of the batches before it, done ahead on the consumer's thread.

The writer's critical path is its own thread: prepare a batch (Python, holding the GIL), insert
it (the engine, GIL released), then remember its ids in the recent-id window (Python). The
consumer's thread decodes the next batch meanwhile and is idle once done. `stage(events)` moves
to that thread what depends only on the batch itself: the in-batch repeats dropped, the events
grouped by kind, what the window reads of each hot event (`recent.Marks`), and the columns of
each kind with a column builder, built for the whole group and encoded as the insert sends them
(`blocks.encoded`: the JSON arrays and the integer columns' bounds, ~0.1 s of GIL-held work per
100k step events that would otherwise sit on the writer's critical path, bench/RESULTS.md). The
writer then judges the staged groups against the window (which needs every batch before) and
inserts the encoded columns as they are when the window and the store say every event of the
group is new (the steady state); otherwise it builds the columns of the events it keeps, as
without staging.

Pure: no I/O, no state; a staged batch is the same whichever thread made it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter

from vigil.analyzer.ingest.blocks import Columns, Encoded, encoded
from vigil.analyzer.ingest.columns import BUILDERS
from vigil.analyzer.ingest.processors import RECENT
from vigil.analyzer.ingest.recent import Marks
from vigil.contract.hotkinds import Ingestable

_EVENT_ID = attrgetter("event_id")


@dataclass(frozen=True, kw_only=True)
class Staged:
    events: Sequence[Ingestable]  # the batch as staged (the writer checks it is the one it writes)
    size: int  # its length when staged (the consumer may append to the list after)
    repeats: int  # events dropped as repeats of an earlier one in the batch
    groups: dict[str, list[Ingestable]]  # kind -> its unique events, in batch order
    marks: dict[str, Marks]  # hot kind -> what the window reads of its group
    built: dict[str, Columns]  # kind with a column builder -> its group's columns
    encoded: dict[str, Encoded]  # the same, each column encoded as the insert sends it

    def of(self, events: Sequence[Ingestable]) -> bool:
        """Whether this is the staging of `events` as they are now."""
        return self.events is events and self.size == len(events)


def first_mask(ids: Sequence[str]) -> list[bool] | None:
    """Which ids are the first of their value (the one kept of a repeated event_id); None when none repeats."""
    if len(set(ids)) == len(ids):
        return None
    seen: set[str] = set()
    return [not (i in seen or seen.add(i)) for i in ids]  # type: ignore[func-returns-value]


def first_of_each(events: Sequence[Ingestable]) -> list[Ingestable]:
    """The events without repeats of an event_id (the first one kept), in order."""
    keep = first_mask(list(map(_EVENT_ID, events)))
    return list(events) if keep is None else list(compress(events, keep))


def stage(events: Sequence[Ingestable], build: bool = True) -> Staged:
    """Stage a batch; `build=False` leaves the columns to the writer (a batch it splits in halves)."""
    unique = first_of_each(events)
    groups: dict[str, list[Ingestable]] = defaultdict(list)
    for e in unique:
        groups[e.kind].append(e)
    built = {k: BUILDERS[k][1](g) for k, g in groups.items() if k in BUILDERS} if build else {}
    return Staged(events=events, size=len(events), repeats=len(events) - len(unique), groups=dict(groups),
                  marks={k: Marks.of(g) if k not in built else Marks.of_columns(built[k])
                         for k, g in groups.items() if k in RECENT},
                  built=built, encoded={k: encoded(c) for k, c in built.items()})
