"""Which of some rows' event_ids a table already holds: the writer's exact check, off the hot path.

Used only for rows the recent-id window cannot judge (late re-sends, low-volume kinds,
batches re-read after a crash or a rebalance, the halves of a batch being bisected). The
ids travel through a per-writer temporary Memory table and a semi-join, never as a query
parameter (binding 20,000 ids costs ~160 ms per query even against an empty table, the
temporary table ~10 ms); the look-up is bounded by the table's job_id and its `LOOKUP`
column (step or ts; on the minute-first tables also the minutes, `schema.MINUTE_FIRST`),
so a spool replay of one host's contiguous steps reads a few granules, however large the
table is.

`before` restricts the check to rows ingested before an instant: a batch re-read after a
crash must be judged as its first attempt was, not against what that attempt wrote.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from vigil.analyzer.ingest.blocks import Columns
from vigil.analyzer.ingest.processors import LOOKUP
from vigil.analyzer.schema import MINUTE_FIRST, minutes


def _param(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return str(value)


class StoredIds:
    def __init__(self, client: Any) -> None:
        self._client = client
        self._probe = f"ingest_probe_{uuid.uuid4().hex[:12]}"
        self._ready = False

    def _table(self) -> str:
        if not self._ready:
            self._client.command(f"CREATE TEMPORARY TABLE IF NOT EXISTS {self._probe} "
                                 "(job_id String, event_id String) ENGINE = Memory")
            self._ready = True
        else:
            self._client.command(f"TRUNCATE TABLE {self._probe}")
        return self._probe

    def stored(self, table: str, cols: Columns, before: datetime | None = None) -> set[str]:
        """The event_ids among `cols` (a table's rows) that `table` already holds (ingested before `before`)."""
        if not cols or not cols["event_id"]:
            return set()
        prune = LOOKUP[table]
        keys = sorted(set(zip(cols["job_id"], cols["event_id"], strict=True)))
        probe = self._table()
        self._client.insert(probe, keys, column_names=["job_id", "event_id"])
        values = cols[prune]
        typ = "UInt64" if prune == "step" else "DateTime64(3, 'UTC')"
        params: dict[str, Any] = {"lo": _param(min(values)), "hi": _param(max(values))}
        sql = (f"SELECT DISTINCT event_id FROM {table} WHERE job_id IN (SELECT job_id FROM {probe}) "
               f"AND {prune} BETWEEN {{lo:{typ}}} AND {{hi:{typ}}} AND event_id IN (SELECT event_id FROM {probe})")
        if table in MINUTE_FIRST:  # the minutes the rows span: the engine prunes by them, not by `ts`
            sql += f" AND {minutes(f'{{lo:{typ}}}', f'{{hi:{typ}}}')}"
        if before is not None:
            sql += " AND ingested_at < {before:DateTime64(3, 'UTC')}"
            params["before"] = _param(before)
        return {str(r[0]) for r in self._client.query(sql, parameters=params).result_rows}
