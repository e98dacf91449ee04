"""Process-wide runtime settings of the processes that host vigil's services (`vigil up`, `vigil analyzer`).

Python's cyclic garbage collector runs a young collection after every 700 allocations of container
objects, and each collection walks every young container alive: the lists of a batch being built
and, after a full collection, whatever start-up left. The ingest allocates ~2 containers per event
(a step event's phase maps, which hold no cycles and are freed by reference counting), so at
100,000 events per batch it ran ~300 young collections per batch: ~0.2 s of GC per 100k events,
a fifth of the ingest's Python (bench/RESULTS.md). `tune_gc` keeps the collector, with

* start-up's objects (modules, settings, models: never garbage) frozen into the permanent
  generation, so no collection walks them again;
* a young generation of `YOUNG` allocations: a few collections per batch instead of hundreds;
  garbage in cycles lives a little longer (at most `YOUNG` more allocations), nothing else changes.

Process-wide, so only the commands that run a hosting process call it, once, when its services have
started (`vigil up`, `vigil analyzer`; the benches that host the analyzer the same way). Library code
and tests keep Python's defaults. Freezing only exempts objects from the cyclic collector: a frozen
object is still freed when its last reference goes (every batch is), only a cycle among start-up's
objects would stay.
"""

from __future__ import annotations

import gc

YOUNG = 100_000
"""Container allocations between young collections (Python's default: 700)."""
MIDDLE = 20
"""Young collections between collections of the middle generation (Python's default: 10)."""


def tune_gc() -> None:
    """Freeze what is alive now and raise the young generation's threshold (see the module docstring)."""
    gc.collect()
    gc.freeze()
    _, _, old = gc.get_threshold()
    gc.set_threshold(YOUNG, MIDDLE, old)
