"""The ClickHouse batch writer: exactly once per event, at a cost per batch that does not grow with the tables.

Two kinds of repeats reach the writer, and each is removed where it is cheap:

* **Batches written again** (a retry after a failed insert; a batch re-read after a crash
  between write and commit). Each table's rows of a batch are one insert block under a
  token derived from the batch's Kafka offsets (`blocks`, migration 0140): ClickHouse drops
  a repeat in the raw table and in every rollup, and a retry after a partial write fills
  only the views it missed. For that, a repeat must be cut into the same rows: the batch's
  intent is recorded first (the chain's intent step, `steps.intent`), a retry reuses the rows
  prepared for the first attempt, and a re-cut after a crash is judged against rows ingested
  *before* that intent.
* **Events sent again** by a producer (an agent replaying its spool) arrive in new batches.
  In-batch repeats are dropped; for the high-volume kinds the recent-id window (`recent`)
  answers in memory; the rest (late re-sends, low-volume kinds, re-checked or re-cut
  batches) is looked up exactly in ClickHouse (`lookup`), off the hot path. Raw tables stay
  ReplacingMergeTrees keyed on event_id as the last line of defence.

An insert that fails because of the data (a value out of a column's range) fails on every
retry, so the writer bisects the batch down to the events that cannot be stored and returns
them (the consumer dead-letters them); the halves are checked table by table against what is
stored, since a table may have taken its rows before another refused. A failure that a
smaller insert may avoid (`failures.splits`: too many partitions in one block, events on
more than 100 days) is bisected the same way; if one event alone still fails with it, it
was the store's overload, and it is retried. Transient store failures raise `Unreachable`
(the consumer retries them); anything else propagates (a bug: the consumer stops).

A batch whose step and NIC records the decode process (`offload`) decoded comes with their columns
encoded (`write_offloaded`): the writer inserts them as they are when that is what it would have
made of the batch's events (a first attempt, every event new to the window, none of those kinds
decoded here, no event_id shared with the events decoded here); any other such batch is written
from `everything()`, every event as an object, as `write` writes it.

Host-keyed partitions mean one event is only ever handled by one consumer of the group.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, TypeVar

from vigil.analyzer.ingest.blocks import BlockInserter, Columns, Encoded, columns, concat, height
from vigil.analyzer.ingest.columns import BUILDERS
from vigil.analyzer.ingest.lookup import StoredIds
from vigil.analyzer.ingest.offload import Offloaded
from vigil.analyzer.ingest.processors import LOOKUP, RECENT, VERIFIED, Row, TableRow, process
from vigil.analyzer.ingest.recent import Marks, RecentIds
from vigil.analyzer.ingest.staging import Staged, first_of_each, stage
from vigil.clickhouse.failures import is_data_error, is_transient, splits
from vigil.contract.hotkinds import Ingestable
from vigil.errors import Unreachable, one_line
from vigil.kafka.consumer import BatchId, Unstorable
from vigil.kafka.deadletter import DeadLetter, DeadLetterSink, clean_utf8

T = TypeVar("T")
_EVENT_ID = attrgetter("event_id")


@dataclass
class _Prepared:
    tables: dict[str, Columns | Encoded]  # table -> its rows of the batch, column-oriented (or encoded by the offload)
    ids: list[str]  # the event_ids of the batch's high-volume events, for the window once stored
    marks: Marks  # what the window reads of them (in the same order)


@dataclass(kw_only=True)
class ClickHouseWriter:
    """A `BatchWriter` for vigil.kafka.BatchingConsumer (and for direct feeding in benchmarks and tests)."""

    client: Any
    window_s: float = 60.0
    check_existing: bool = True  # False: no look-ups at all (benchmarks and fixtures that write unique events)
    verify: Callable[[Any], bool] | None = None  # the gate on decisions (`processors.DECISIONS`); None: trusted
    rows_written: int = 0
    skipped_duplicates: int = 0
    looked_up: int = 0  # events checked against ClickHouse (the window could not judge them)
    offloaded_batches: int = 0  # batches inserted from the offload's encoded groups
    offload_fallbacks: int = 0  # batches with offloaded records written from their events instead
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("stage", "intent", "prepare", "insert"), 0.0))
    on_stored: Callable[[dict[str, Any]], None] | None = None  # each stored batch's tables (the analyzer's metrics)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.recent = RecentIds(window_s=self.window_s)
        self._stored = StoredIds(self.client)
        self._blocks = BlockInserter(self.client)
        self._started = False
        self._tokened: set[str] = set()  # tables that deduplicate inserts by token (migration 0140)
        self._token_logs: dict[str, datetime] = {}  # table rebuilt (0198) -> when its token log started empty
        self._prepared: tuple[str, _Prepared] | None = None
        self._staged: Staged | None = None  # the next batch, staged ahead by the consumer's thread

    def locked(self, fn: Callable[[], T]) -> T:
        """`fn` (a call on this writer's client, e.g. the intent ledger's) while no batch is written, a transient
        failure raised as `Unreachable`."""
        with self._lock:
            return self._guard(fn)

    def write(self, events: Sequence[Ingestable], batch: BatchId | None = None) -> list[Unstorable]:
        with self._lock:
            return self._guard(lambda: self._write(events, batch, None, lambda: events))

    def write_offloaded(self, events: Sequence[Ingestable], deferred: Any, everything: Callable[[], Sequence[Ingestable]],
                        batch: BatchId) -> list[Unstorable]:
        """`write` of a batch part decoded by the offload (`offload.Offloaded`): its groups' encoded columns are
        inserted as they are in the steady state (every event new to the window, a first attempt); any other batch
        is written from `everything()`, every event of it as an object, as `write` would."""
        with self._lock:
            return self._guard(lambda: self._write(events, batch, deferred, everything))

    @staticmethod
    def _guard(fn: Callable[[], T]) -> T:
        try:
            return fn()
        except Exception as exc:
            if is_transient(exc):
                raise Unreachable(f"ClickHouse: {one_line(exc)}") from exc
            raise

    def _write(self, events: Sequence[Ingestable], batch: BatchId | None, deferred: Offloaded | None,
               everything: Callable[[], Sequence[Ingestable]]) -> list[Unstorable]:
        if not self._started:  # what was stored before this process: the window cannot vouch for it
            rows = self.client.query("SELECT job_id, host, max(last_ts) FROM host_clock GROUP BY job_id, host").result_rows
            self.recent.started_after({(str(j), str(h)): ts if ts.tzinfo else ts.replace(tzinfo=UTC) for j, h, ts in rows})
            tables = {str(n): str(e) for n, e in self.client.query(
                "SELECT name, engine_full FROM system.tables WHERE database = currentDatabase()").result_rows}
            self._tokened = {n for n, e in tables.items() if "non_replicated_deduplication_window" in e}
            if "token_log_starts" in tables:  # made by migration 0198 (a store migrated before has none)
                self._token_logs = {str(n): t if t.tzinfo else t.replace(tzinfo=UTC) for n, t in self.client.query(
                    "SELECT table_name, max(at) FROM token_log_starts GROUP BY table_name").result_rows}
            self._started = True
        token = batch.token if batch is not None else None
        t1 = time.perf_counter()
        if token is not None and self._prepared is not None and self._prepared[0] == token:
            prepared = self._prepared[1]  # a retry: exactly the rows of the first attempt
        else:
            fast = self._prepare_offloaded(events, deferred, batch) if deferred is not None else None
            if fast is None:
                self.offload_fallbacks += deferred is not None
                prepared = self._prepare(everything(), batch)
            else:
                self.offloaded_batches += 1
                prepared = fast
            if token is not None:
                self._prepared = (token, prepared)
        t2 = time.perf_counter()
        self.seconds["prepare"] += t2 - t1
        try:
            self._insert(prepared, token)
            self.seconds["insert"] += time.perf_counter() - t2
            bad: list[Unstorable] = []
        except Exception as exc:
            if not (is_data_error(exc) or splits(exc)):
                raise
            # a re-cut batch's halves are judged against what was stored before its intent: a repeat in both would be
            # stored by each
            bad = self._isolate(first_of_each(everything()), batch, exc, "")
        refused = {u.event.event_id for u in bad}
        if refused:
            keep = [i not in refused for i in prepared.ids]
            self.recent.add_all((), prepared.marks.where(keep))
        else:
            self.recent.add_all((), prepared.marks)
        self.recent.evict()
        self._prepared = None
        return bad

    def stage(self, events: Sequence[Ingestable]) -> None:
        """Stage the next batch ahead (`staging`), on the consumer's thread while this one writes the batch before
        (`vigil.kafka.consumer.Staging`); `write` of the same list uses it. Holds no lock: pure work, one slot."""
        t = time.perf_counter()
        self._staged = stage(events)
        self.seconds["stage"] += time.perf_counter() - t

    def _prepare(self, events: Sequence[Ingestable], batch: BatchId | None, check_all: bool = False) -> _Prepared:
        staged = self._staged
        if staged is None or not staged.of(events):
            staged = stage(events, build=False)
        self.skipped_duplicates += staged.repeats
        window = not check_all and batch is not None and batch.first_attempt is None and not batch.recheck
        tables: dict[str, Columns | Encoded] = {}
        ids: list[str] = []
        marks = Marks.made([], [], [], [])
        rows: dict[str, list[Row]] = defaultdict(list)  # kinds without a column builder
        checked: dict[str, list[Row]] = defaultdict(list)  # their rows the window cannot vouch for, per table
        for kind, group in staged.groups.items():
            hot = kind in RECENT
            if hot:
                marked = staged.marks[kind]
                ids += map(_EVENT_ID, group)
                marks += marked
            if hot and window:
                fresh, unknown, seen = self.recent.split(group, marked)
                self.skipped_duplicates += seen
            elif self.check_existing:
                fresh, unknown = [], group
            else:
                fresh, unknown = group, []
            if not self.check_existing:
                fresh, unknown = fresh + unknown, []
            if kind in BUILDERS:
                table, build = BUILDERS[kind]
                if unknown:
                    stored = self._lookup(table, build(unknown), batch)
                    self.looked_up += len(unknown)
                    self.skipped_duplicates += len(stored)
                    fresh += [e for e in unknown if e.event_id not in stored]
                if fresh:
                    whole = not unknown and len(fresh) == len(group)  # fresh holds every event of the group
                    tables[table] = staged.encoded[kind] if whole and kind in staged.encoded else build(fresh)
                continue
            for e in fresh:
                for table, row in process(e, self._verified(e)):
                    rows[table].append(row)
            for e in unknown:
                for table, row in process(e, self._verified(e)):
                    (checked if table in LOOKUP else rows)[table].append(row)
        skipped: set[str] = set()
        self.looked_up += len({r["event_id"] for rows_ in checked.values() for r in rows_})
        for table, rows_ in checked.items():
            stored = self._lookup(table, columns(rows_), batch)
            skipped |= stored
            rows[table].extend(r for r in rows_ if r["event_id"] not in stored)
        self.skipped_duplicates += len(skipped)
        for table, rows_ in rows.items():
            if rows_:
                before = tables.get(table, {})
                assert not isinstance(before, Encoded)
                tables[table] = concat(before, columns(rows_))
        return _Prepared(tables=dict(sorted(tables.items())), ids=ids, marks=marks)

    def _verified(self, e: Any) -> bool:
        return self.verify is None or e.kind not in VERIFIED or self.verify(e)

    def _prepare_offloaded(self, events: Sequence[Ingestable], off: Offloaded, batch: BatchId | None) -> _Prepared | None:
        """The batch from the offload's groups and the events decoded here, when that is what `_prepare` of the whole
        batch would make: a first attempt (or no checks at all), no event of a group's kind decoded here, no
        event_id both here and in a group (the batch's first would be kept), every group's event new to the
        window. None otherwise: the caller prepares the whole batch as objects."""
        window = batch is not None and batch.first_attempt is None and not batch.recheck
        if self.check_existing and not window:
            return None
        if any(e.kind in BUILDERS for e in events):
            return None
        ours = set(map(_EVENT_ID, events))
        if ours and not all(ours.isdisjoint(g.ids) for g in off.groups.values()):
            return None
        marked: dict[str, Marks] = {}
        for kind, g in off.groups.items():
            marked[kind] = m = g.marks if g.marks is not None else Marks.made(g.jobs, g.hosts, g.times,
                                                                             list(map(hash, g.ids)))
            if self.check_existing:
                _fresh, unknown, seen = self.recent.split(g.ids, m)
                if unknown or seen:
                    return None
        base = self._prepare(events, batch)
        tables, ids, marks = dict(base.tables), base.ids, base.marks
        for kind, g in off.groups.items():
            tables[g.table] = g.block
            ids += g.ids
            marks += marked[kind]
            self.skipped_duplicates += g.repeats
        return _Prepared(tables=dict(sorted(tables.items())), ids=ids, marks=marks)

    def _lookup(self, table: str, cols: Columns, batch: BatchId | None) -> set[str]:
        """The event_ids of `cols` that `table` holds (a table that ignores tokens must not take a re-cut's rows
        again: it is judged against everything stored, the others against what was stored before the intent).
        A table rebuilt after the first attempt (migration 0198) has a token log that never saw it: it is judged
        against everything stored too."""
        first = batch.first_attempt if batch is not None else None
        vouched = first is not None and table in self._tokened and first >= self._token_logs.get(table, first)
        return self._stored.stored(table, cols, before=first if vouched else None)

    def _insert(self, prepared: _Prepared, token: str | None) -> None:
        for table, cols in prepared.tables.items():
            self._blocks.insert(table, cols, f"{token}:{table}" if token else None)
            self.rows_written += height(cols)
        if self.on_stored is not None:  # once every table of it is stored: a retried insert is counted once
            self.on_stored(prepared.tables)

    def _isolate(self, events: list[Ingestable], batch: BatchId | None, exc: Exception, path: str) -> list[Unstorable]:
        """Store what can be stored; the events that fail on their own come back with the reason."""
        if len(events) == 1:
            if not is_data_error(exc):
                raise exc  # fails alone for a reason a smaller insert cannot avoid: the store's, retried
            return [Unstorable(event=events[0], reason=f"ClickHouse rejected it: {one_line(exc)}")]
        out: list[Unstorable] = []
        mid = len(events) // 2
        for i, half in enumerate((events[:mid], events[mid:])):
            sub = f"{path}{i}"
            try:
                self._insert(self._prepare(half, batch, check_all=True), f"{batch.token}/{sub}" if batch else None)
            except Exception as inner:
                if not (is_data_error(inner) or splits(inner)):
                    raise
                out += self._isolate(half, batch, inner, sub)
        return out

    def write_rows(self, rows: Sequence[TableRow]) -> None:
        """Insert pre-processed rows (no dedup): for benchmarks that produce unique events."""
        by_table: dict[str, list[Row]] = defaultdict(list)
        for table, row in rows:
            by_table[table].append(row)
        for table, batch in by_table.items():
            self._blocks.insert(table, columns(batch), None)


@dataclass(kw_only=True)
class ClickHouseDeadLetters:
    """Dead letters to the topic (via `inner`, the source of truth) and to the `dead_letters` table."""

    client: Any
    inner: DeadLetterSink
    on_written: Callable[[Sequence[DeadLetter]], None] | None = None  # the analyzer's metrics

    def write(self, letters: Sequence[DeadLetter]) -> None:
        if not letters:
            return
        self.inner.write(letters)
        now = datetime.now(UTC)
        docs = [d.document() for d in letters]
        rows = [[now, d["topic"], d["partition"], d["offset"], d["reason"], _payload_text(d),
                 d["payload_bytes"], d["payload_sha256"], int(bool(d.get("payload_truncated")))] for d in docs]
        self.client.insert("dead_letters", rows,
                           column_names=["ts", "topic", "partition", "offset", "reason", "payload",
                                         "payload_bytes", "payload_sha256", "payload_truncated"])
        if self.on_written is not None:
            self.on_written(letters)


def _payload_text(letter: dict[str, Any]) -> str:
    """The payload's JSON as the letter keeps it: whole, or its head (at most PAYLOAD_HEAD bytes either way)."""
    if letter.get("payload_truncated"):
        return clean_utf8(str(letter["payload"]))
    return clean_utf8(json.dumps(letter["payload"], default=str, ensure_ascii=False))
