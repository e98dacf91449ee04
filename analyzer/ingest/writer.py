"""The ClickHouse batch writer: idempotent by event_id, so rollups never double-count.

Kafka delivers at least once (a batch is re-read after a crash between the write and
the commit). Before inserting, the writer drops events already in the batch and asks
ClickHouse, per table, which of the rows' event_ids are already stored there (a
primary-key-pruned lookup), and inserts only the rest: an event that becomes rows in
two tables (a heartbeat: `heartbeats` and `gpu_stats`) and was cut off after the first
insert gets its second table's rows on the retry. Materialised rollups fire on insert,
so skipping there — not merging later — is what keeps their sums exact. Raw tables are
ReplacingMergeTrees keyed on event_id as a second line of defence.

An insert that fails because of the data (a value out of a column's range) fails on
every retry, so the writer bisects the batch down to the events that cannot be stored
and returns them (the consumer dead-letters them); store failures (down, busy) raise
and are retried by the consumer.

Host-keyed partitions mean one event is only ever handled by one consumer of the
group, so the check-then-insert has no concurrent writer for the same event_id.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from vigil.analyzer.ingest.processors import Row, TableRow, process
from vigil.clickhouse.failures import is_data_error
from vigil.contract import Event
from vigil.errors import one_line
from vigil.kafka.consumer import Unstorable
from vigil.kafka.deadletter import DeadLetter, DeadLetterSink

# table -> column that prunes the lookup of its stored event_ids (tables with no rollups,
# `jobs` and `job_ranks`, rely on their ReplacingMergeTree alone)
_PRUNE: dict[str, str] = {
    "step_timings": "step", "heartbeats": "ts", "gpu_stats": "ts", "nic_counters": "ts", "log_lines": "ts",
    "process_exits": "ts", "collective_traces": "ts", "alert_events": "ts", "checkpoints": "ts",
    "recovery_actions": "ts",
}


def _ch_param(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return str(value)


def insert_rows(client: Any, table: str, rows: Sequence[Row]) -> None:
    """Insert named rows of one table, column by column (every row of a table has the same columns)."""
    names = list(rows[0])
    client.insert(table, [[r[n] for r in rows] for n in names], column_names=names, column_oriented=True)


@dataclass(kw_only=True)
class ClickHouseWriter:
    """A `BatchWriter` for vigil.kafka.BatchingConsumer (and for direct feeding in benchmarks)."""

    client: Any
    check_existing: bool = True
    rows_written: int = 0
    skipped_duplicates: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def write(self, events: Sequence[Event]) -> list[Unstorable]:
        with self._lock:
            try:
                self._insert(events)
                return []
            except Exception as exc:
                if not is_data_error(exc):
                    raise
                return self._isolate(list(events), exc)

    def write_rows(self, rows: Sequence[TableRow]) -> None:
        """Insert pre-processed rows (no dedup): for benchmarks that produce unique events."""
        by_table: dict[str, list[Row]] = defaultdict(list)
        for table, row in rows:
            by_table[table].append(row)
        for table, batch in by_table.items():
            insert_rows(self.client, table, batch)

    def _isolate(self, events: list[Event], exc: Exception) -> list[Unstorable]:
        """Store what can be stored; the events that fail on their own come back with the reason."""
        if len(events) == 1:
            return [Unstorable(event=events[0], reason=f"ClickHouse rejected it: {one_line(exc)}")]
        out: list[Unstorable] = []
        mid = len(events) // 2
        for half in (events[:mid], events[mid:]):
            try:
                self._insert(half)
            except Exception as inner:
                if not is_data_error(inner):
                    raise
                out += self._isolate(half, inner)
        return out

    def _insert(self, events: Sequence[Event]) -> None:
        unique: dict[str, Event] = {}
        for e in events:
            unique.setdefault(e.event_id, e)
        self.skipped_duplicates += len(events) - len(unique)
        by_table: dict[str, list[Row]] = defaultdict(list)
        for e in unique.values():
            for table, row in process(e):
                by_table[table].append(row)
        skipped: set[str] = set()
        for table, rows in by_table.items():
            if self.check_existing and table in _PRUNE:
                stored = self._stored(table, rows)
                if stored:
                    rows = [r for r in rows if r["event_id"] not in stored]
                    skipped |= stored
            if rows:
                insert_rows(self.client, table, rows)
                self.rows_written += len(rows)
        self.skipped_duplicates += len(skipped)

    def _stored(self, table: str, rows: list[Row]) -> set[str]:
        prune = _PRUNE[table]
        values = [r[prune] for r in rows]
        typ = "UInt64" if prune == "step" else "DateTime64(3, 'UTC')"
        sql = (f"SELECT event_id FROM {table} WHERE job_id IN {{jobs:Array(String)}} "
               f"AND {prune} BETWEEN {{lo:{typ}}} AND {{hi:{typ}}} AND event_id IN {{ids:Array(String)}}")
        params = {"jobs": sorted({r["job_id"] for r in rows}), "lo": _ch_param(min(values)),
                  "hi": _ch_param(max(values)), "ids": sorted({r["event_id"] for r in rows})}
        return {str(r[0]) for r in self.client.query(sql, parameters=params).result_rows}


@dataclass(kw_only=True)
class ClickHouseDeadLetters:
    """Dead letters to the topic (via `inner`, the source of truth) and to the `dead_letters` table."""

    client: Any
    inner: DeadLetterSink

    def write(self, letters: Sequence[DeadLetter]) -> None:
        if not letters:
            return
        self.inner.write(letters)
        now = datetime.now(UTC)
        rows = [[now, d.topic, d.partition, d.offset, d.reason, json.dumps(d.payload, default=str)[:65536]]
                for d in letters]
        self.client.insert("dead_letters", rows,
                           column_names=["ts", "topic", "partition", "offset", "reason", "payload"])
