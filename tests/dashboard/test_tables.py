"""The dashboard's declared view of the analyzer's tables agrees with the migrated schema."""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Any

import pytest

import vigil.dashboard.queries as queries
from tests.support.longjob import HOURS, grow, selected
from vigil.clickhouse.client import connect
from vigil.dashboard.queries import host
from vigil.dashboard.tables import ALL, Table

pytestmark = pytest.mark.clickhouse
_WORD = re.compile(r"[a-z_][a-z0-9_]*")


def schema(client: Any) -> dict[str, set[str]]:
    return {t.name: {str(r[0]) for r in client.query(f"DESCRIBE TABLE {t.name}").result_rows} for t in ALL}


def query_texts() -> list[tuple[str, str]]:
    """Every SQL string the query modules define (module-level constants), as (where, text)."""
    out = []
    for info in pkgutil.iter_modules(queries.__path__):
        module = importlib.import_module(f"{queries.__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, str) and re.search(r"\b(FROM|JOIN)\b", value):
                out.append((f"{info.name}.{name}", value))
    return out


def test_declared_tables_and_columns_exist(clickhouse_dsn: str, database: str) -> None:
    columns = schema(connect(clickhouse_dsn, database=database))
    for table in ALL:
        missing = set(table.columns) - columns[table.name]
        assert not missing, f"the dashboard reads {table.name}.{sorted(missing)}, which the schema lacks"


def test_queries_use_only_declared_columns_of_the_tables_they_read(clickhouse_dsn: str, database: str) -> None:
    columns = schema(connect(clickhouse_dsn, database=database))
    texts = query_texts()
    assert len(texts) >= 20
    for where, sql in texts:
        read: list[Table] = [t for t in ALL if re.search(rf"\b(FROM|JOIN)\s+{t.name}\b", sql)]
        words = set(_WORD.findall(sql))
        declared = {c for t in read for c in t.columns}
        for t in read:
            undeclared = (words & columns[t.name]) - declared
            assert not undeclared, f"{where} uses {t.name}.{sorted(undeclared)} without declaring it"


def test_time_keys_match_the_sorting_keys_and_every_read_bounds_them(clickhouse_dsn: str, database: str) -> None:
    """A table sorted by a time bucket first (analyzer 0198) is declared so, and every query reading it bounds the
    bucket: otherwise it selects a granule per minute of the job's whole history."""
    client = connect(clickhouse_dsn, database=database)
    keys = {str(n): str(k) for n, k in client.query(
        "SELECT name, sorting_key FROM system.tables WHERE database = currentDatabase()").result_rows}
    declared = [t for t in ALL if t.time_key]
    assert {t.name for t in declared} == {"heartbeats", "nic_counters"}
    for table in ALL:
        key = keys.get(table.name, "")
        if table.time_key:
            assert key.startswith(f"job_id, {table.time_key.format('ts')}, "), (table.name, key)
        else:
            assert not re.match(r"job_id, to\w+\(", key), f"{table.name} sorts by a time bucket first: declare it"
    reads = 0
    for where, sql in query_texts():
        for table in declared:
            n = len(re.findall(rf"\b(FROM|JOIN)\s+{table.name}\b", sql))
            reads += n
            bounded = sql.count(f"{table.time_key.format('ts')} >= ")
            assert bounded >= n, f"{where} reads {table.name} {n} time(s), {bounded} bounded by its minute"
    assert reads >= 3


def test_the_host_page_reads_the_minutes_of_its_window_of_a_long_job(clickhouse_dsn: str, database: str) -> None:
    """On a 3-hour job the host page's heartbeat and NIC reads select the granules of their hour, its identity those
    of the host's last minute. (At this job's 12 hosts a granule holds several minutes of every host; at 1,000+ hosts
    a host's minute is one granule of ~40: bench/long_job_reads.py.)"""
    client = connect(clickhouse_dsn, database=database)
    grow(client)
    t1 = int(client.query("SELECT toUnixTimestamp64Milli(max(ts)) FROM heartbeats WHERE job_id = 'long'"
                          ).result_rows[0][0])
    # the last hour and the first one (a window in the past reads its own minutes, not those up to the job's end)
    for end in (t1, t1 - (HOURS - 1) * 3_600_000):
        params = {"job": "long", "host": "h3", "t0": end - 3_600_000, "t1": end, "bucket": 60}
        for sql, most in ((host.HEARTBEATS_SQL, 1 / HOURS), (host.NIC_SQL, 1 / HOURS), (host.IDENTITY_SQL, 0.1)):
            reads = selected(client, sql, params)
            assert reads
            for got, total in reads:  # unbounded: every granule (a hour's third, with margin for granule edges)
                assert total >= 30 and got <= total * most * 1.5 + 2, (sql, end, got, total)
