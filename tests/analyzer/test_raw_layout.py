"""The NIC and heartbeat tables sort by time bucket first (migration 0198): a detector's window read selects the
granules of the minutes it spans, not one per series of the whole job; the rebuild keeps every row, whatever point it
was interrupted at, and a batch re-cut across it is not stored twice."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.longjob import HOURS, T0, grow, selected
from vigil.analyzer import schema
from vigil.analyzer.advisor import query as advisor_query
from vigil.analyzer.detect import flap, hang, heartbeat, quiet, traffic
from vigil.analyzer.detect.base import ch_time
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.clickhouse.migrations import Migration, MigrationSet, migrate
from vigil.contract import Heartbeat, NicCounters, ProcessState
from vigil.kafka.consumer import BatchId, OffsetRange

pytestmark = pytest.mark.clickhouse

REBUILD = schema.MIGRATIONS.directory / "0198_time_bucketed_raw.sql"


def _fresh(dsn: str) -> Any:
    client = connect(dsn, database=f"t_{uuid.uuid4().hex[:10]}")
    return client


def test_window_reads_select_the_minutes_they_span_not_the_whole_job(clickhouse_dsn: str) -> None:
    client = _fresh(clickhouse_dsn)
    migrate_all(client, 400)
    grow(client)
    at = T0 + timedelta(hours=HOURS) - timedelta(seconds=5)
    base = {"job": "long", "at": ch_time(at)}
    reads: dict[str, tuple[str, dict[str, Any]]] = {
        "traffic": (traffic._NIC_SQL, dict(zero=1e3, active=1e6, recent=ch_time(at - timedelta(seconds=10)),
                                           lo=ch_time(at - timedelta(seconds=130)), quiet=[])),
        "quiet": (quiet._SERIES_SQL, dict(lo=ch_time(at - timedelta(seconds=300)))),
        "flap": (flap._SQL, dict(frac=0.1, busy=1e6, lo=ch_time(at - timedelta(seconds=180)))),
        "heartbeat": (heartbeat._SQL, dict(lo=ch_time(at - timedelta(seconds=heartbeat.LOOKBACK_S)), miss=3.0,
                                           run_lo=ch_time(at - timedelta(seconds=60)))),
        "hang": (hang._ALIVE_SQL, dict(lo=ch_time(at - timedelta(seconds=60)))),
        "advisor": (advisor_query.CPU_SQL, dict(span=300)),
    }
    for name, (sql, params) in reads.items():
        reads_of = selected(client, sql, {**base, **params})
        assert reads_of, name
        for got, total in reads_of:
            # the window's buckets: a few minutes of the job's 180 (old key: every granule, one per series)
            assert total >= 30 and got <= total // 6, (name, got, total)


def _older(tmp_path: Path) -> MigrationSet:
    """The analyzer's migrations before the rebuild."""
    older = tmp_path / "before_0198"
    older.mkdir()
    for path in schema.MIGRATIONS.directory.glob("*.sql"):
        if int(path.name[:4]) < 198:
            (older / path.name).write_text(path.read_text())
    return MigrationSet(owner="analyzer", directory=older, ids=schema.MIGRATIONS.ids)


def _events(n: int) -> list[Any]:
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    out: list[Any] = []
    for i in range(n):
        ts = now + timedelta(seconds=i)
        out.append(NicCounters(job_id="re", host=f"h{i % 3}", device="mlx5_0", link="rdma", tx_bytes=i, rx_bytes=i,
                               tx_bps=1e9, rx_bps=1e9, interval_s=1.0, ts=ts))
        out.append(Heartbeat(job_id="re", host=f"h{i % 3}", ts=ts, interval_s=2.0,
                             processes=[ProcessState(pid=1, status="running")]))
    return out


def _counts(client: Any) -> tuple[int, ...]:
    """Raw rows without FINAL (a repeat shows before any merge) and the NIC rollup's sample count."""
    return tuple(int(client.query(sql).result_rows[0][0]) for sql in (
        "SELECT count() FROM nic_counters", "SELECT count() FROM heartbeats",
        "SELECT sum(n) FROM nic_windows", "SELECT uniqExact(event_id, ingested_at) FROM nic_counters"))


def _keys(client: Any) -> dict[str, str]:
    return {str(n): str(k) for n, k in client.query(
        "SELECT name, sorting_key FROM system.tables WHERE database = currentDatabase() "
        "AND name IN ('nic_counters', 'heartbeats')").result_rows}


def test_the_rebuild_keeps_every_row_and_a_batch_re_cut_across_it_is_stored_once(clickhouse_dsn: str,
                                                                                   tmp_path: Path) -> None:
    client = _fresh(clickhouse_dsn)
    migrate(client, [_older(tmp_path)], {"ttl_days": 400})
    assert _keys(client)["nic_counters"].startswith("job_id, host")
    events = _events(30)
    batch = BatchId(ranges=(OffsetRange(topic="t", partition=0, first=0, last=59),))
    ClickHouseWriter(client=client).write(events, batch)  # records its intent, then writes: never committed
    intent_at = ClickHouseWriter(client=client).intents([("t", 0)])[("t", 0)].at
    before = _counts(client)
    assert before == (30, 30, 30, 30)

    migrate_all(client, 400)
    assert _keys(client) == {"nic_counters": "job_id, toStartOfMinute(ts), host, device, ts, event_id",
                             "heartbeats": "job_id, toStartOfMinute(ts), host, ts, event_id"}
    assert _counts(client) == before  # every row, its ingestion time kept
    assert not client.query("SELECT name FROM system.tables WHERE database = currentDatabase() "
                            "AND name LIKE '%0198'").result_rows

    # the batch re-read after the crash: its token is unknown to the rebuilt tables, so it is judged by its ids
    recut = BatchId(ranges=batch.ranges, first_attempt=intent_at)
    assert ClickHouseWriter(client=client).write(events, recut) == []
    assert _counts(client) == before

    # the rollup views feed the rebuilt tables
    fresh = _events(31)[-2:]
    assert ClickHouseWriter(client=client).write(fresh, BatchId(ranges=(OffsetRange(topic="t", partition=0,
                                                                                     first=60, last=61),))) == []
    assert _counts(client) == (31, 31, 31, 31)
    assert client.query("SELECT max(last_ts) FROM host_clock WHERE job_id = 're' AND source = 'nic'"
                        ).result_rows[0][0].replace(tzinfo=UTC) == fresh[0].ts


@pytest.mark.parametrize("crash_after", ["INSERT", "EXCHANGE", "DROP TABLE nic_counters_0198"])
def test_a_rebuild_interrupted_anywhere_ends_with_every_row_under_the_new_key(clickhouse_dsn: str, tmp_path: Path,
                                                                               crash_after: str) -> None:
    client = _fresh(clickhouse_dsn)
    migrate(client, [_older(tmp_path)], {"ttl_days": 400})
    ClickHouseWriter(client=client).write(_events(20), BatchId(ranges=(OffsetRange(topic="t", partition=0,
                                                                                   first=0, last=39),)))
    before = _counts(client)
    for stmt in _rebuild_statements():  # the statements up to the crash, then the process died
        client.command(stmt)
        if stmt.startswith(crash_after):
            break
    migrate_all(client, 400)  # not recorded: the whole migration runs again
    assert _keys(client)["nic_counters"].startswith("job_id, toStartOfMinute(ts)")
    assert _keys(client)["heartbeats"].startswith("job_id, toStartOfMinute(ts)")
    assert _counts(client) == before



def _rebuild_statements() -> list[str]:
    """Migration 0198's statements without their comment lines."""
    rebuild = Migration(id=198, name="time_bucketed_raw", sql=REBUILD.read_text())
    return ["\n".join(line for line in stmt.splitlines() if not line.lstrip().startswith("--")).strip()
            for stmt in rebuild.statements({"ttl_days": 400})]


def _write(client: Any, events: list[Any], first: int) -> None:
    batch = BatchId(ranges=(OffsetRange(topic="t", partition=0, first=first, last=first + len(events) - 1),))
    assert ClickHouseWriter(client=client).write(events, batch) == []


def test_rows_another_writer_stores_during_the_copy_are_caught_up(clickhouse_dsn: str, tmp_path: Path) -> None:
    """Against the rule (ingest stopped while it runs): a writer that stores rows while a table is copied loses none
    of them."""
    client = _fresh(clickhouse_dsn)
    migrate(client, [_older(tmp_path)], {"ttl_days": 400})
    events = _events(20)  # a NIC sample and a heartbeat per second
    _write(client, events[:20], 0)
    copies = [f"INSERT INTO {t}_0198 SELECT * FROM {t}" for t in ("nic_counters", "heartbeats")]
    for stmt in _rebuild_statements():
        client.command(stmt)
        if stmt in copies:  # the table is copied, its catch-up and exchange are next: 5 more seconds stored
            n = 20 + 10 * copies.index(stmt)
            _write(client, events[n:n + 10], n)
    assert _keys(client)["nic_counters"].startswith("job_id, toStartOfMinute(ts)")
    assert _counts(client)[:2] == (20, 20)
