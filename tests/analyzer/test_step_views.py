"""Migration 0199: two materialised views fewer on step_timings. `job_phase_steps` is gone and `job_step_spans`
is a plain view over `job_step_runs`: the epoch fold reads from it what it read from the old rollup, on a store
migrated before and on a new one, and its reads stay within the day of the buckets they ask for."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.crafted import steps
from tests.support.databases import FIXTURE_TTL_DAYS, analyzer_migrations_before
from vigil.analyzer import schema
from vigil.analyzer.detect import epoch
from vigil.analyzer.detect.base import ch_time
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.clickhouse.migrations import migrate

pytestmark = pytest.mark.clickhouse

TTL = {"ttl_days": FIXTURE_TTL_DAYS}
DAY0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
SPANS = ("SELECT job_id, bucket, min(min_step), max(max_step), min(first_ts), max(last_ts), sum(rows) "
         "FROM job_step_spans GROUP BY job_id, bucket ORDER BY job_id, bucket")
RAW = ("SELECT job_id, toStartOfInterval(toDateTime(ts), INTERVAL 10 SECOND) AS bucket, min(step), max(step), "
       "min(ts), max(ts), count() FROM step_timings FINAL GROUP BY job_id, bucket ORDER BY job_id, bucket")


def _runs(job: str, hosts: int, start: datetime) -> list[Any]:
    """A run of 40 steps, then a restart from step 20 (the steps go back), the second run late by a few seconds."""
    first = steps(job, hosts, 40, start=start)
    again = steps(job, hosts, 30, first_step=20, start=start + timedelta(seconds=47), seed=1)
    return first + again


def _rows(client: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in client.query(sql).result_rows]


def _views_on_steps(client: Any) -> set[str]:
    deps = client.query("SELECT dependencies_table FROM system.tables WHERE database = currentDatabase() "
                        "AND name = 'step_timings'").result_rows[0][0]
    return {str(d) for d in deps}


def test_spans_read_from_the_view_as_from_the_rollup_before(clickhouse_dsn: str, tmp_path: Path) -> None:
    client = connect(clickhouse_dsn, database=f"t_{uuid.uuid4().hex[:10]}")
    older = analyzer_migrations_before(tmp_path, 199)
    # today's writer writes the step health (1010) and digest (1020) columns: an older store that has them, as if
    # migrated that far
    for number in ("1010", "1020"):
        columns = next(schema.MIGRATIONS.directory.glob(f"{number}_*.sql"))
        (older.directory / columns.name).write_text(columns.read_text())
    migrate(client, [older], TTL)
    w = ClickHouseWriter(client=client)
    assert w.write(_runs("old", 6, DAY0 + timedelta(hours=23, minutes=59, seconds=30))) == []  # across midnight
    before = _rows(client, SPANS)
    assert {"job_phase_steps_mv", "job_step_spans_mv"} <= _views_on_steps(client) and before == _rows(client, RAW)

    assert "0199_fewer_step_views" in migrate_all(client, FIXTURE_TTL_DAYS).applied
    assert not {"job_phase_steps_mv", "job_step_spans_mv"} & _views_on_steps(client)
    assert client.query("EXISTS TABLE job_phase_steps").result_rows[0][0] == 0
    assert _rows(client, SPANS) == before  # the history, as the rollup held it

    assert ClickHouseWriter(client=client).write(_runs("new", 4, DAY0 + timedelta(days=1, hours=1))) == []
    after = _rows(client, SPANS)
    assert after == _rows(client, RAW) and len(after) > len(before)
    assert "0199_fewer_step_views" in migrate_all(client, FIXTURE_TTL_DAYS).already  # once


def _read(plan: str, index: str, what: str) -> tuple[int, int]:
    """(parts or granules selected, of how many) by one index of a ReadFromMergeTree in an EXPLAIN indexes = 1."""
    got = re.search(index + r".*?" + what + r": (\d+)/(\d+)", plan, re.S)
    assert got is not None, plan
    return int(got.group(1)), int(got.group(2))


def test_the_epoch_fold_reads_the_day_and_the_granules_of_its_buckets_only(clickhouse_dsn: str) -> None:
    client = connect(clickhouse_dsn, database=f"t_{uuid.uuid4().hex[:10]}")
    migrate_all(client, FIXTURE_TTL_DAYS)
    w = ClickHouseWriter(client=client)
    assert w.write(_runs("j", 4, DAY0 + timedelta(hours=6))) == []
    assert w.write(steps("j", 1, 30_000, gpus=1, start=DAY0 + timedelta(days=1))) == []  # 30,000 rows of job_step_runs
    client.command("OPTIMIZE TABLE job_step_runs FINAL")  # the day's rows in one part of several granules
    lo = DAY0 + timedelta(days=1, hours=4)
    hi = lo + timedelta(minutes=5)
    params = {"job": "j", "after": ch_time(lo), "upto": ch_time(hi)}
    plan = "\n".join(str(r[0]) for r in client.query(f"EXPLAIN indexes = 1 {epoch.SPANS_SQL}",
                                                     parameters=params).result_rows)
    assert "job_step_runs" in plan, plan
    parts, of = _read(plan, "Min-Max", "Parts")
    assert parts < of, plan  # the other day's part is not read
    granules, of = _read(plan, "bucket_minmax", "Granules")
    assert of >= 3 and granules == 1, plan  # nor the granules of the day's other hours
    got = client.query(epoch.SPANS_SQL, parameters=params).result_rows
    assert len(got) == 30 and all(lo < r[0].replace(tzinfo=UTC) <= hi for r in got)
    assert [r[1:] for r in got] == [r[2:6] for r in _rows(client, RAW) if lo < r[1].replace(tzinfo=UTC) <= hi]
