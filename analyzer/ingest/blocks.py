"""One table's rows of a batch as one insert block, under the batch's deduplication token.

ClickHouse identifies a deduplicated insert by (table, partition, token) and, when the
insert spans several Native blocks, the block's index: clickhouse-connect cuts blocks at
2**21 bytes of row size (16,384 step rows), so a 20,000-row batch would become two blocks
and a re-cut with a different row count would not line up. Forcing one block makes the
identity independent of the content and the row count. The settings are explicit: a
dependent materialised view's block is deduplicated too, so rollups never double-count and
a retry after a partial write fills only the views it missed.

Speed: column types are read once per table, and LowCardinality columns are sent as their
plain type (the engine converts them on insert); clickhouse-connect would otherwise build
every LowCardinality dictionary in Python, about a third of its serialisation time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from vigil.analyzer.ingest.processors import Row

DEDUP = {"insert_deduplicate": 1, "deduplicate_blocks_in_dependent_materialized_views": 1}
_LC = "LowCardinality("


def columns(rows: Sequence[Row]) -> tuple[list[str], list[list[Any]]]:
    """Named rows of one table (same keys) -> column names and column-oriented data."""
    names = list(rows[0])
    return names, [[r[n] for r in rows] for n in names]


def plain_type(ch_type: str) -> str:
    """`Map(LowCardinality(String), Float64)` -> `Map(String, Float64)`: every LowCardinality wrapper removed."""
    while (i := ch_type.find(_LC)) >= 0:
        depth, j = 1, i + len(_LC)
        while depth:
            depth += {"(": 1, ")": -1}.get(ch_type[j], 0)
            j += 1
        ch_type = ch_type[:i] + ch_type[i + len(_LC):j - 1] + ch_type[j:]
    return ch_type


class BlockInserter:
    def __init__(self, client: Any) -> None:
        self._client = client
        self._types: dict[str, dict[str, str]] = {}

    def _type_names(self, table: str, names: list[str]) -> list[str]:
        if table not in self._types:
            res = self._client.query("SELECT name, type FROM system.columns WHERE database = currentDatabase() "
                                     "AND table = {t:String}", parameters={"t": table})
            self._types[table] = {str(n): plain_type(str(t)) for n, t in res.result_rows}
        return [self._types[table][n] for n in names]

    def insert(self, table: str, rows: Sequence[Row], token: str | None) -> None:
        """Insert `rows` into `table` as one block; with `token`, a repeat of it stores nothing."""
        names, data = columns(rows)
        types = self._type_names(table, names)
        for i, t in enumerate(types):  # datetimes as ticks: clickhouse-connect's per-value conversion is slow
            if t.startswith("DateTime64(3") and data[i] and isinstance(data[i][0], datetime):
                data[i] = [int(v.timestamp() // 1) * 1000 + v.microsecond // 1000 for v in data[i]]
        settings: dict[str, Any] = {**DEDUP, "insert_deduplication_token": token} if token else {}
        ctx = self._client.create_insert_context(table, column_names=names, column_type_names=types,
                                                 column_oriented=True, settings=settings)
        ctx.req_block_size = len(rows)
        ctx.data = data
        self._client.insert(context=ctx)
