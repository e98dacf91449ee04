"""Process-wide runtime settings of the processes that host vigil's services (`vigil up`, `vigil analyzer`).

Python's cyclic garbage collector runs a young collection each time 700 more container objects
are alive than at the last one (allocations minus deallocations), and each walks every young
container, element by element: the batch's lists of 100,000 events and columns among them. The
ingest allocates ~2 containers per event (a step event's phase maps, freed by reference counting),
so it ran ~300 young collections per 100k-event batch: ~0.2 s of GC per 100k events, a fifth of the
ingest's Python (bench/RESULTS.md). Full collections, which walk everything alive, came with them
and grew with the process's heap. `tune_gc`:

* freezes what is alive when it is called (start-up's modules, settings and models, and whatever
  the services' threads hold at that moment) into the permanent generation: no full collection
  walks it again. A frozen object is still freed when its last reference goes; only a cycle among
  them stays (a one-time, bounded amount);
* raises the young threshold to `YOUNG`: a few young collections per batch instead of hundreds.
  The older generations keep Python's ratios, so each runs `YOUNG / 700` times less often: a
  cycle that outlives a young collection (an exception's traceback holding a batch, say) waits
  ~10 batches for the middle generation and ~100 for a full one, instead of a fraction of one.

Process-wide, so only the commands that run a hosting process call it, once, when its services
have started (`vigil up`, `vigil analyzer`; the benches that host the analyzer the same way; the
ingest's decode process, `analyzer/ingest/offload.py`, once it has imported what it runs). Library
code and tests keep Python's defaults.
"""

from __future__ import annotations

import gc

YOUNG = 100_000
"""Net container allocations between young collections (Python's default: 700)."""


def tune_gc() -> None:
    """Freeze what is alive now and raise the young generation's threshold (see the module docstring)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)
