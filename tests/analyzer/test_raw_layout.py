"""The NIC and heartbeat tables sort by the minute first (migration 0198): a detector's window read selects the
granules of the minutes it spans, not one per series of the whole job nor every minute after it; the rebuild keeps
every row and the rollup views, whatever point it was interrupted at, a batch re-cut across it is not stored twice,
and a service starting beside others does not run it on tables that hold rows."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.databases import FIXTURE_TTL_DAYS, analyzer_migrations_before
from tests.support.longjob import HOURS, T0, grow, selected
from vigil.analyzer import delivery, schema
from vigil.analyzer.advisor import query as advisor_query
from vigil.analyzer.detect import flap, hang, heartbeat, quiet, traffic
from vigil.analyzer.detect.base import ch_time
from vigil.analyzer.ingest.intents import IntentLedger
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.clickhouse.migrations import Migration, MigrationSet, migrate
from vigil.contract import Heartbeat, NicCounters, ProcessState
from vigil.errors import MigrationError
from vigil.kafka.consumer import BatchId, OffsetRange

pytestmark = pytest.mark.clickhouse

REBUILD = schema.MIGRATIONS.directory / "0198_time_bucketed_raw.sql"
TTL = {"ttl_days": FIXTURE_TTL_DAYS}


def _fresh(dsn: str) -> Any:
    return connect(dsn, database=f"t_{uuid.uuid4().hex[:10]}")


def _reads(at: datetime) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every read of the two tables a detector turn (and the advisor) makes, with its parameters at `at`."""
    return {
        "traffic": (traffic.NIC_SQL, dict(zero=1e3, active=1e6, recent=ch_time(at - timedelta(seconds=10)),
                                           lo=ch_time(at - timedelta(seconds=130)), quiet=[])),
        "quiet": (quiet.SERIES_SQL, dict(lo=ch_time(at - timedelta(seconds=300)))),
        "flap": (flap.SQL, dict(frac=0.1, busy=1e6, lo=ch_time(at - timedelta(seconds=180)))),
        "heartbeat": (heartbeat.SQL, dict(lo=ch_time(at - timedelta(seconds=heartbeat.LOOKBACK_S)), miss=3.0,
                                           run_lo=ch_time(at - timedelta(seconds=60)))),
        "hang": (hang.ALIVE_SQL, dict(lo=ch_time(at - timedelta(seconds=60)))),
    }


def test_window_reads_select_the_minutes_they_span_not_the_whole_job(clickhouse_dsn: str) -> None:
    client = _fresh(clickhouse_dsn)
    migrate_all(client, FIXTURE_TTL_DAYS)
    grow(client)
    end = T0 + timedelta(hours=HOURS)
    # now, and an instant judged in the past (a replay, a catch-up): an hour in, two hours of the job after it
    for at in (end - timedelta(seconds=5), T0 + timedelta(hours=1)):
        reads = _reads(at)
        if at > T0 + timedelta(hours=2):  # reads made at the job's newest instant only
            reads["advisor"] = (advisor_query.CPU_SQL, dict(span=300))
            for table in sorted(schema.MINUTE_FIRST):  # the watermark's, for a silent host (no upper bound)
                reads[f"delivery {table}"] = (delivery.read(table), dict(lo=ch_time(at - timedelta(seconds=30)), hosts=["h1"]))
        for name, (sql, params) in reads.items():
            found = selected(client, sql, {"job": "long", "at": ch_time(at), **params})
            assert found, name
            for got, total in found:
                # the window's minutes: a few of the job's 180 (old key: every granule; no upper bound: the rest)
                assert total >= 30 and got <= total // 6, (name, at, got, total)


def _older(tmp_path: Path) -> MigrationSet:
    """The analyzer's migrations before the rebuild."""
    return analyzer_migrations_before(tmp_path, 198)


def _events(n: int, start: int = 0) -> list[Any]:
    """A NIC sample and a heartbeat per second of three hosts, seconds start..start+n."""
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    out: list[Any] = []
    for i in range(start, start + n):
        ts = t0 + timedelta(seconds=i)
        out.append(NicCounters(job_id="re", host=f"h{i % 3}", device="mlx5_0", link="rdma", tx_bytes=i, rx_bytes=i,
                               tx_bps=1e9, rx_bps=1e9, interval_s=1.0, ts=ts))
        out.append(Heartbeat(job_id="re", host=f"h{i % 3}", ts=ts, interval_s=2.0,
                             processes=[ProcessState(pid=1, status="running")]))
    return out


def _write(client: Any, events: list[Any], first: int, **batch: Any) -> None:
    ranges = (OffsetRange(topic="t", partition=0, first=first, last=first + len(events) - 1),)
    assert ClickHouseWriter(client=client).write(events, BatchId(ranges=ranges, **batch)) == []


def _counts(client: Any) -> tuple[int, ...]:
    """Raw rows without FINAL (a repeat shows before any merge), distinct (id, ingestion time) pairs, and what the
    four rollup views of the two tables took: NIC samples, and per source the hosts' newest time."""
    return tuple(int(client.query(sql).result_rows[0][0]) for sql in (
        "SELECT count() FROM nic_counters", "SELECT count() FROM heartbeats",
        "SELECT uniqExact(event_id, ingested_at) FROM nic_counters", "SELECT sum(n) FROM nic_windows",
        "SELECT toUnixTimestamp(max(last_ts)) FROM host_presence",
        "SELECT toUnixTimestamp(max(last_ts)) FROM host_clock WHERE source = 'heartbeat'",
        "SELECT toUnixTimestamp(max(last_ts)) FROM host_clock WHERE source = 'nic'"))


def _keys(client: Any) -> dict[str, str]:
    return {str(n): str(k) for n, k in client.query(
        "SELECT name, sorting_key FROM system.tables WHERE database = currentDatabase() "
        "AND name IN ('nic_counters', 'heartbeats')").result_rows}


def _rebuilt(client: Any) -> None:
    assert _keys(client) == {"nic_counters": "job_id, toStartOfMinute(ts), host, device, ts, event_id",
                             "heartbeats": "job_id, toStartOfMinute(ts), host, ts, event_id"}
    assert not client.query("SELECT name FROM system.tables WHERE database = currentDatabase() "
                            "AND name LIKE '%0198'").result_rows


def _views_feed(client: Any, start: int) -> None:
    """New rows reach all four rollups of the two tables."""
    before = _counts(client)
    _write(client, _events(2, start), 1000 + start)
    after = _counts(client)
    assert after[:4] == (before[0] + 2, before[1] + 2, before[2] + 2, before[3] + 2)
    assert after[4] > before[4] and after[5] > before[5] and after[6] > before[6]


def test_the_rebuild_keeps_every_row_and_a_batch_re_cut_across_it_is_stored_once(clickhouse_dsn: str,
                                                                                   tmp_path: Path) -> None:
    client = _fresh(clickhouse_dsn)
    migrate(client, [_older(tmp_path)], TTL)
    assert _keys(client)["nic_counters"].startswith("job_id, host")
    events = _events(30)
    batch = BatchId(ranges=(OffsetRange(topic="t", partition=0, first=0, last=59),))
    ledger = IntentLedger(client, "vigil-analyzer")
    ledger.record(batch)  # its intent recorded (the chain's intent step), then written: never committed
    ClickHouseWriter(client=client).write(events, batch)
    intent_at = ledger.latest([("t", 0)])[("t", 0)].at
    before = _counts(client)
    assert before[:4] == (30, 30, 30, 30)

    migrate_all(client, FIXTURE_TTL_DAYS)
    _rebuilt(client)
    assert _counts(client) == before  # every row, its ingestion time kept

    # the batch re-read after the crash: its token is unknown to the rebuilt tables, so it is judged by its ids
    assert ClickHouseWriter(client=client).write(events, BatchId(ranges=batch.ranges, first_attempt=intent_at)) == []
    assert _counts(client) == before
    _views_feed(client, 40)


@pytest.mark.parametrize("crash_after", ["INSERT INTO nic_counters_0198 SELECT", "EXCHANGE TABLES nic_counters",
                                         "DROP VIEW IF EXISTS nic_windows_mv", "DROP TABLE nic_counters_0198",
                                         "INSERT INTO heartbeats_0198 SELECT", "DROP VIEW IF EXISTS host_clock_hb_mv"])
def test_a_rebuild_interrupted_anywhere_ends_with_every_row_under_the_new_key(clickhouse_dsn: str, tmp_path: Path,
                                                                               crash_after: str) -> None:
    client = _fresh(clickhouse_dsn)
    migrate(client, [_older(tmp_path)], TTL)
    _write(client, _events(20), 0)
    before = _counts(client)
    statements = _rebuild_statements()
    assert any(s.startswith(crash_after) for s in statements)
    for stmt in statements:  # the statements up to the crash, then the process died
        client.command(stmt)
        if stmt.startswith(crash_after):
            break
    migrate_all(client, FIXTURE_TTL_DAYS)  # not recorded: the whole migration runs again
    _rebuilt(client)
    assert _counts(client) == before
    _views_feed(client, 40)


def _rebuild_statements() -> list[str]:
    """Migration 0198's statements without their comment lines."""
    rebuild = Migration(id=198, name="time_bucketed_raw", sql=REBUILD.read_text())
    return ["\n".join(line for line in stmt.splitlines() if not line.lstrip().startswith("--")).strip()
            for stmt in rebuild.statements(TTL)]


def test_rows_another_writer_stores_during_the_copy_are_caught_up(clickhouse_dsn: str, tmp_path: Path) -> None:
    """Against the rule (every writer stopped while it runs): a writer that stores rows while a table is copied
    loses none of them."""
    client = _fresh(clickhouse_dsn)
    migrate(client, [_older(tmp_path)], TTL)
    _write(client, _events(10), 0)
    copies = [f"INSERT INTO {t}_0198 SELECT * FROM {t} SETTINGS max_partitions_per_insert_block = 0"
              for t in ("nic_counters", "heartbeats")]
    for stmt in _rebuild_statements():
        client.command(stmt)
        if stmt in copies:  # the table is copied, its catch-up and exchange are next: 5 more seconds stored
            n = 10 + 5 * copies.index(stmt)
            _write(client, _events(5, n), 2 * n)
    assert _keys(client)["nic_counters"].startswith("job_id, toStartOfMinute(ts)")
    assert _counts(client)[:2] == (20, 20)


def test_a_service_does_not_rebuild_tables_that_hold_rows(clickhouse_dsn: str, tmp_path: Path) -> None:
    """`rebuild=False` (a service migrating at start, a running stack asked to) refuses 0198 on a store with rows and
    changes nothing; on empty tables (a fresh store) it runs; `vigil migrate` (rebuild=True) runs it on rows."""
    empty = _fresh(clickhouse_dsn)
    migrate(empty, [_older(tmp_path)], TTL)
    assert "0198_time_bucketed_raw" in migrate_all(empty, FIXTURE_TTL_DAYS, rebuild=False).applied
    _rebuilt(empty)

    client = _fresh(clickhouse_dsn)
    migrate(client, [_older(tmp_path)], TTL)
    _write(client, _events(5), 0)
    with pytest.raises(MigrationError, match=r"0198_time_bucketed_raw rebuilds nic_counters, heartbeats .*`vigil migrate`"):
        migrate_all(client, FIXTURE_TTL_DAYS, rebuild=False)
    assert _keys(client)["nic_counters"].startswith("job_id, host")
    assert not client.query("SELECT id FROM vigil_migrations WHERE id = 198").result_rows
    migrate_all(client, FIXTURE_TTL_DAYS)
    _rebuilt(client)
    assert _counts(client)[:2] == (5, 5)


def test_a_store_of_many_days_is_copied_in_one_insert(clickhouse_dsn: str, tmp_path: Path) -> None:
    """Rows on more than 100 days (the engine's partitions per insert block) are copied all the same."""
    client = _fresh(clickhouse_dsn)
    migrate(client, [_older(tmp_path)], TTL)
    client.command("""INSERT INTO heartbeats (event_id, job_id, host, ts, interval_s, procs_total, procs_running, gpus)
        SELECT concat('d', toString(number)), 'days', 'h0', now64(3) - toIntervalHour(number * 3), 2.0, 1, 1, 1
        FROM numbers(1200) SETTINGS max_partitions_per_insert_block = 0""")
    assert client.query("SELECT uniqExact(toDate(ts)) FROM heartbeats").result_rows[0][0] > 100
    migrate_all(client, FIXTURE_TTL_DAYS)
    _rebuilt(client)
    assert client.query("SELECT count() FROM heartbeats").result_rows[0][0] == 1200
