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
with a parse or range error, which `vigil.clickhouse.failures` counts as the data's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

Columns = dict[str, list[Any]]
"""One table's rows, column-oriented: column name -> one value per row (all lists of one length)."""

DEDUP = {"insert_deduplicate": 1, "deduplicate_blocks_in_dependent_materialized_views": 1}
_READ = {"date_time_input_format": "best_effort"}
_encode = msgspec.json.Encoder().encode


def columns(rows: Sequence[dict[str, Any]]) -> Columns:
    """Named rows of one table (same keys) -> column-oriented data."""
    return {n: [r[n] for r in rows] for n in rows[0]} if rows else {}


def height(cols: Columns) -> int:
    """The number of rows in `cols`."""
    return len(next(iter(cols.values()), ()))


def concat(a: Columns, b: Columns) -> Columns:
    """The rows of `a` then those of `b` (the same columns)."""
    if not a:
        return b
    if not b:
        return a
    return {n: a[n] + b[n] for n in a}


class BlockInserter:
    def __init__(self, client: Any) -> None:
        self._client = client

    def insert(self, table: str, cols: Columns, token: str | None) -> None:
        """Insert `cols` into `table` as one block; with `token`, a repeat of it stores nothing."""
        settings: dict[str, Any] = {**_READ, **DEDUP, "insert_deduplication_token": token} if token else dict(_READ)
        self._client.raw_insert(table, list(cols), _encode(cols), settings=settings, fmt="JSONColumns")
