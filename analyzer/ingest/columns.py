"""The hot kinds' rows built a column at a time: a batch of step or NIC events -> one list per column.

`processors` says what rows an event becomes, one dict per event; for the kinds a large job
sends thousands of per second that dict (and the transposition back to columns) was most of
the ingest's Python. Here a table's columns are made from the batch's *event columns*
(`vigil.contract.colwire`: one list per field of the event), which a columnar record decodes
into directly, with no object per event (`FROM_COLUMNS`); events decoded one by one (row
records, pydantic models) are first read into event columns, one `map(attrgetter(...))` pass
in C per field (`BUILDERS`). The result is exactly `blocks.columns` of the processors' rows —
tests/analyzer/test_columns.py checks it column by column on the fast-path corpus, rows and
columns, and fails on a column either side lacks — so `processors` stays the one definition of
a row.

Heartbeats stay on `processors` (one event per host every few seconds, a row per GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vigil.analyzer.ingest.blocks import Columns
from vigil.contract.colwire import EventColumns, columns_of


def _pick(cols: EventColumns, names: str) -> Columns:
    return {n: cols[n] for n in names.split()}


def _step(cols: EventColumns) -> Columns:
    out = _pick(cols, "event_id job_id host rank local_rank world_size")
    out.update(dp=cols["coords.dp"], tp=cols["coords.tp"], pp=cols["coords.pp"])
    out.update(_pick(cols, "step ts step_ms phases phase_kinds tokens tflops mfu"))
    out["failed"] = list(map(int, cols["failed"]))
    out["dropped"] = cols["dropped"]
    out.update(_pick(cols, "loss grad_norm nonfinite update_ratio digest"))
    return out


def _nic(cols: EventColumns) -> Columns:
    return _pick(cols, "event_id job_id host device port link ts tx_bytes rx_bytes tx_bps rx_bps interval_s")


FROM_COLUMNS: dict[str, tuple[str, Callable[[EventColumns], Columns]]] = {
    "step": ("step_timings", _step),
    "nic": ("nic_counters", _nic),
}
"""kind -> (the one table its events become, its columns from the events' columns)."""


def _builder(kind: str) -> Callable[[Sequence[Any]], Columns]:
    make = FROM_COLUMNS[kind][1]
    return lambda events: make(columns_of(kind, list(events)))


BUILDERS: dict[str, tuple[str, Callable[[Sequence[Any]], Columns]]] = {
    kind: (table, _builder(kind)) for kind, (table, _make) in FROM_COLUMNS.items()}
"""kind -> (the one table its events become, the column builder from events)."""
