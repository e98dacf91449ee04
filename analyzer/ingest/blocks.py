"""One table's rows of a batch as one insert block, under the batch's deduplication token.

ClickHouse identifies a deduplicated insert by (table, partition, token) and, when the
insert spans several Native blocks, the block's index: clickhouse-connect cuts blocks at
2**21 bytes of row size (16,384 step rows), so a 20,000-row batch would become two blocks
and a re-cut with a different row count would not line up. Forcing one block makes the
identity independent of the content and the row count. The settings are explicit: a
dependent materialised view's block is deduplicated too, so rollups never double-count and
a retry after a partial write fills only the views it missed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vigil.analyzer.ingest.processors import Row

DEDUP = {"insert_deduplicate": 1, "deduplicate_blocks_in_dependent_materialized_views": 1}


def columns(rows: Sequence[Row]) -> tuple[list[str], list[list[Any]]]:
    """Named rows of one table (same keys) -> column names and column-oriented data."""
    names = list(rows[0])
    return names, [[r[n] for r in rows] for n in names]


def insert_block(client: Any, table: str, rows: Sequence[Row], token: str | None) -> None:
    """Insert `rows` into `table` as one block; with `token`, a repeat of it stores nothing."""
    names, data = columns(rows)
    settings: dict[str, Any] = {**DEDUP, "insert_deduplication_token": token} if token else {}
    ctx = client.create_insert_context(table, column_names=names, column_oriented=True, settings=settings)
    ctx.req_block_size = len(rows)
    ctx.data = data
    client.insert(context=ctx)
