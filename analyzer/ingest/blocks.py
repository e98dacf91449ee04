"""One table's rows of a batch as one insert block, under the batch's deduplication token.

ClickHouse identifies a deduplicated insert by (table, partition, token) and, when the
insert spans several blocks, the block's index. A batch's rows of one table travel as one
`JSONColumns` document (`{"column": [values...], ...}`), which the engine reads as one
block whatever its row count, so the identity is independent of the content and of how a
re-cut counts its rows. The settings are explicit: a dependent materialised view's block
is deduplicated too, so rollups never double-count and a retry after a partial write fills
only the views it missed.

Speed: the columns are serialised by msgspec in C and parsed by the engine in C++ (its
JSON reader converts every value to the column's type, LowCardinality and Map included);
no value is converted in Python. Timestamps go as RFC 3339 text, read with
`date_time_input_format = best_effort` (fractions beyond the column's milliseconds are
cut, as a DateTime64(3) stores them). A value the engine cannot take fails the insert
with a parse error, which `vigil.clickhouse.failures` counts as the data's. The engine's
JSON reader wraps an integer beyond its column (2**40 into a UInt32 becomes 0), so each
integer column's range is checked first, per column with `min`/`max` in C: a value
beyond it fails the insert with a ValueError naming the column (the data's fault too).
A column the engine parses faster through an input of another type (`INPUTS`: step_timings'
maps arrive as Map(String, ...) and are stored with LowCardinality keys) is sent under the
input's name once its migration has made it.

The hot raw tables (`UNMERGED`) are written without the engine's merge of the block on insert
(`optimize_on_insert = 0`): a ReplacingMergeTree insert otherwise collapses rows of the block that
share a sorting key, a pass over every row that cost ~2 us per step row (~30 % of the insert with
its rollups, bench/RESULTS.md). It can collapse nothing there: those tables get one row per event,
their sorting key ends with `event_id`, and the writer drops an event repeated in its batch
(tests/analyzer/test_blocks.py checks the three facts). Their rollups are GROUP BY views whose
rows of one block already differ by the target's key; merges still collapse across parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

Columns = dict[str, list[Any]]
"""One table's rows, column-oriented: column name -> one value per row (all lists of one length)."""


@dataclass(frozen=True, kw_only=True)
class Encoded:
    """One table's rows with each column already encoded as its JSON array (`encoded`: made ahead of the insert, by
    `staging` on the consumer's thread or by the decode process, `offload`), with what `check_ranges` reads of them:
    each integer column's least and greatest value."""

    arrays: dict[str, bytes]
    bounds: dict[str, tuple[int, int]]
    rows: int

DEDUP = {"insert_deduplicate": 1, "deduplicate_blocks_in_dependent_materialized_views": 1}
INPUTS = {"step_timings": {"phases": "phases_in", "phase_kinds": "phase_kinds_in"}}
"""Columns a table reads through an input of a faster-to-parse type (migration 0195): row column -> input."""
UNMERGED = frozenset({"step_timings", "heartbeats", "nic_counters"})
"""Tables whose rows of one insert block never share a sorting key (see the module docstring)."""
_READ = {"date_time_input_format": "best_effort"}
_UNMERGED = {"optimize_on_insert": 0}
_encode = msgspec.json.Encoder().encode
_RANGE = {f"{s}Int{b}": ((-(2 ** (b - 1)), 2 ** (b - 1) - 1) if s == "" else (0, 2**b - 1))
          for s in ("", "U") for b in (8, 16, 32, 64)}


def encoded(cols: Columns) -> Encoded:
    """`cols` as the insert will send them: each column's JSON array, with each integer column's least and greatest
    value (what `check_ranges` reads), in C where it can."""
    return Encoded(arrays={n: _encode(v) for n, v in cols.items()}, bounds=_bounds(cols), rows=height(cols))


def _bounds(cols: Columns) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for name, values in cols.items():
        first = values[0] if values else 0.0
        if type(first) is int:
            try:
                out[name] = (min(values), max(values))
                continue
            except TypeError:  # a null among them
                pass
        elif first is not None:
            continue  # a float, text, map or time column
        present = [v for v in values if v is not None]
        if present and type(present[0]) is int:
            out[name] = (min(present), max(present))
    return out


def columns(rows: Sequence[dict[str, Any]]) -> Columns:
    """Named rows of one table (same keys) -> column-oriented data."""
    return {n: [r[n] for r in rows] for n in rows[0]} if rows else {}


def height(cols: Columns | Encoded) -> int:
    """The number of rows in `cols`."""
    return cols.rows if isinstance(cols, Encoded) else len(next(iter(cols.values()), ()))


def concat(a: Columns, b: Columns) -> Columns:
    """The rows of `a` then those of `b` (the same columns)."""
    if not a:
        return b
    if not b:
        return a
    return {n: a[n] + b[n] for n in a}


def check_ranges(table: str, cols: Columns, types: dict[str, str]) -> None:
    """ValueError when a value of an integer column (`types`: column -> ClickHouse type) is beyond its type."""
    for name, values in cols.items():
        typ = types.get(name, "")
        nullable = typ.startswith("Nullable(")
        bounds = _RANGE.get(typ[9:-1] if nullable else typ)
        if bounds is None or not values:
            continue
        present = [v for v in values if v is not None] if nullable else values
        if present and (min(present) < bounds[0] or max(present) > bounds[1]):
            bad = next(v for v in present if not bounds[0] <= v <= bounds[1])
            raise ValueError(f"{table}.{name}: {bad} is out of the range of {typ}")


def check_bounds(table: str, bounds: dict[str, tuple[int, int]], types: dict[str, str]) -> None:
    """`check_ranges` for columns known by their least and greatest value (`bounds`: column -> (min, max)): the
    same error, naming the least value when it is below its type, else the greatest."""
    for name, (least, most) in bounds.items():
        typ = types.get(name, "")
        limits = _RANGE.get(typ[9:-1] if typ.startswith("Nullable(") else typ)
        if limits is not None and (least < limits[0] or most > limits[1]):
            bad = least if least < limits[0] else most
            raise ValueError(f"{table}.{name}: {bad} is out of the range of {typ}")


class BlockInserter:
    def __init__(self, client: Any) -> None:
        self._client = client
        self._types: dict[str, dict[str, str]] = {}

    def _column_types(self, table: str) -> dict[str, str]:
        if table not in self._types:
            res = self._client.query("SELECT name, type FROM system.columns WHERE database = currentDatabase() "
                                     "AND table = {t:String}", parameters={"t": table})
            self._types[table] = {str(n): str(t) for n, t in res.result_rows}
        return self._types[table]

    def insert(self, table: str, cols: Columns | Encoded, token: str | None) -> None:
        """Insert `cols` into `table` as one block; with `token`, a repeat of it stores nothing. Columns already
        encoded make the same document, the same block, after the same checks."""
        types = self._column_types(table)
        inputs = self._inputs(table, types)
        if isinstance(cols, Encoded):
            check_bounds(table, cols.bounds, types)
            names = [inputs.get(n, n) for n in cols.arrays]
            body = b"{" + b",".join(_encode(n) + b":" + a for n, a in zip(names, cols.arrays.values(), strict=True)) + b"}"
        else:
            check_ranges(table, cols, types)
            names = [inputs.get(n, n) for n in cols]
            body = _encode(dict(zip(names, cols.values(), strict=True)) if inputs else cols)
        self._client.raw_insert(table, names, body, settings=self._settings(table, token), fmt="JSONColumns")

    @staticmethod
    def _inputs(table: str, types: dict[str, str]) -> dict[str, str]:
        return {n: i for n, i in INPUTS.get(table, {}).items() if i in types}  # none before the migration

    @staticmethod
    def _settings(table: str, token: str | None) -> dict[str, Any]:
        settings: dict[str, Any] = {**_READ, **DEDUP, "insert_deduplication_token": token} if token else dict(_READ)
        if table in UNMERGED:
            settings.update(_UNMERGED)
        return settings
