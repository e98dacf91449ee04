"""The hot raw tables skip the engine's merge on insert (`blocks.UNMERGED`): what makes that safe holds."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.wire_records import records
from vigil.analyzer.ingest.blocks import UNMERGED
from vigil.analyzer.ingest.processors import process
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.clickhouse.client import connect
from vigil.contract.fastwire import decode_fast
from vigil.kafka.consumer import BatchId, OffsetRange

_KIND = {"step_timings": "step", "heartbeats": "heartbeat", "nic_counters": "nic"}


@pytest.mark.pure
@pytest.mark.parametrize("table", sorted(UNMERGED))
def test_each_event_is_one_row_of_an_unmerged_table(table: str) -> None:
    events: list[Any] = [e for value in records(_KIND[table]) for e in decode_fast(value).events]
    assert len(events) >= 4
    for e in events:
        assert [t for t, _ in process(e)].count(table) == 1, e


@pytest.mark.clickhouse
def test_unmerged_tables_end_their_sorting_key_with_the_event_id(clickhouse_dsn: str, database: str) -> None:
    client = connect(clickhouse_dsn, database=database)
    keys = dict(client.query("SELECT name, sorting_key FROM system.tables WHERE database = currentDatabase()").result_rows)
    for table in UNMERGED:
        assert str(keys[table]).split(", ")[-1] == "event_id", (table, keys[table])


@pytest.mark.clickhouse
@pytest.mark.parametrize("kind", ["step", "nic", "heartbeat"])
def test_an_event_twice_in_a_batch_is_one_row_before_any_merge(clickhouse_dsn: str, database: str, kind: str) -> None:
    """Without the merge on insert nothing collapses a repeat in the block: the writer must drop it first.
    Counted without FINAL, on the window's path and on the look-up's."""
    client = connect(clickhouse_dsn, database=database)
    table = next(t for t, k in _KIND.items() if k == kind)
    ok = [e for value in records(kind) for e in decode_fast(value).events if e.event_id.startswith(f"{kind}-ok-")]
    assert len(ok) == 3
    writer = ClickHouseWriter(client=client)
    assert writer.write([ok[0], ok[1], ok[0]], BatchId(ranges=(OffsetRange(topic="t", partition=0, first=0, last=2),))) == []
    assert writer.write([ok[2], ok[2], ok[1]], None) == []
    got = client.query(f"SELECT event_id, count() FROM {table} GROUP BY event_id ORDER BY event_id").result_rows
    assert got == [(e.event_id, 1) for e in ok]
