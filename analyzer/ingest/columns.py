"""The hot kinds' rows built a column at a time: a batch of step or NIC events -> one list per column.

`processors` says what rows an event becomes, one dict per event; for the kinds a large job
sends thousands of per second that dict (and the transposition back to columns) was most of
the ingest's Python. Here each column is one `map(attrgetter(...), events)` pass in C over the
batch's decoded structs (or pydantic models: same attribute names). The result is exactly
`blocks.columns` of the processors' rows — tests/analyzer/test_columns.py checks it column by
column on the fast-path corpus and fails on a column either side lacks — so `processors`
stays the one definition of a row.

Heartbeats stay on `processors` (one event per host every few seconds, a row per GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from vigil.analyzer.ingest.blocks import Columns


def _take(events: Sequence[Any], names: str) -> Columns:
    return {n: list(map(attrgetter(n), events)) for n in names.split()}


def _step(events: Sequence[Any]) -> Columns:
    cols = _take(events, "event_id job_id host rank local_rank world_size")
    coords = list(map(attrgetter("coords"), events))
    cols.update(_take(coords, "dp tp pp"))
    cols.update(_take(events, "step ts step_ms phases phase_kinds tokens tflops mfu"))
    cols["failed"] = list(map(int, map(attrgetter("failed"), events)))
    cols["dropped"] = list(map(attrgetter("dropped"), events))
    return cols


def _nic(events: Sequence[Any]) -> Columns:
    return _take(events, "event_id job_id host device port link ts tx_bytes rx_bytes tx_bps rx_bps interval_s")


BUILDERS: dict[str, tuple[str, Callable[[Sequence[Any]], Columns]]] = {
    "step": ("step_timings", _step),
    "nic": ("nic_counters", _nic),
}
"""kind -> (the one table its events become, the column builder)."""
