"""The ClickHouse batch writer: idempotent by event_id, so rollups never double-count.

Kafka delivers at least once (a batch is re-read after a crash between the write and
the commit). Before inserting, the writer drops events already in the batch and asks
ClickHouse which of the batch's event_ids are already stored (a primary-key-pruned
lookup per kind), and inserts only the rest. Materialised rollups fire on insert, so
skipping there — not merging later — is what keeps their sums exact. Raw tables are
ReplacingMergeTrees keyed on event_id as a second line of defence.

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

from analyzer.ingest.processors import COLUMNS, TableRow, process
from vigil.contract import Event, StepTiming
from vigil.kafka.deadletter import DeadLetter, DeadLetterSink

# kind -> (table that records its event_id, column that prunes the lookup)
_DEDUP: dict[str, tuple[str, str]] = {
    "step": ("step_timings", "step"), "heartbeat": ("heartbeats", "ts"), "nic": ("nic_counters", "ts"),
    "log": ("log_lines", "ts"), "exit": ("process_exits", "ts"), "collective": ("collective_traces", "ts"),
    "alert": ("alert_events", "ts"),
}


def _kind(e: Event) -> str:
    return str(type(e).model_fields["kind"].default)


def _ch_time(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@dataclass(kw_only=True)
class ClickHouseWriter:
    """A `BatchWriter` for vigil.kafka.BatchingConsumer (and for direct feeding in benchmarks)."""

    client: Any
    check_existing: bool = True
    rows_written: int = 0
    skipped_duplicates: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def write(self, events: Sequence[Event]) -> None:
        with self._lock:
            fresh = self._fresh(events)
            by_table: dict[str, list[Any]] = defaultdict(list)
            for e in fresh:
                for table, row in process(e):
                    by_table[table].append(row)
            for table, rows in by_table.items():
                self.client.insert(table, rows, column_names=list(COLUMNS[table]))
                self.rows_written += len(rows)

    def write_rows(self, rows: Sequence[TableRow]) -> None:
        """Insert pre-processed rows (no dedup): for benchmarks that produce unique events."""
        by_table: dict[str, list[Any]] = defaultdict(list)
        for table, row in rows:
            by_table[table].append(row)
        for table, batch in by_table.items():
            self.client.insert(table, batch, column_names=list(COLUMNS[table]))

    def _fresh(self, events: Sequence[Event]) -> list[Event]:
        unique: dict[str, Event] = {}
        for e in events:
            unique.setdefault(e.event_id, e)
        self.skipped_duplicates += len(events) - len(unique)
        if not self.check_existing:
            return list(unique.values())
        groups: dict[str, list[Event]] = defaultdict(list)
        for e in unique.values():
            groups[_kind(e)].append(e)
        seen: set[str] = set()
        for kind, group in groups.items():
            if kind in _DEDUP:
                seen |= self._stored(kind, group)
        self.skipped_duplicates += len(seen)
        return [e for e in unique.values() if e.event_id not in seen]

    def _stored(self, kind: str, group: list[Event]) -> set[str]:
        table, col = _DEDUP[kind]
        if col == "step":
            values = [e.step for e in group if isinstance(e, StepTiming)]
            lo, hi, typ = str(min(values)), str(max(values)), "UInt64"
        else:
            stamps = [e.ts for e in group]
            lo, hi, typ = _ch_time(min(stamps)), _ch_time(max(stamps)), "DateTime64(3, 'UTC')"
        sql = (f"SELECT event_id FROM {table} WHERE job_id IN {{jobs:Array(String)}} "
               f"AND {col} BETWEEN {{lo:{typ}}} AND {{hi:{typ}}} AND event_id IN {{ids:Array(String)}}")
        params = {"jobs": sorted({e.job_id for e in group}), "lo": lo, "hi": hi, "ids": [e.event_id for e in group]}
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
