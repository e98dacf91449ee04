"""A long job's NIC samples and heartbeats grown in the engine, and how many granules a read of them selects: what
the minute-first raw tables (analyzer migration 0198) are checked with, by the analyzer's and the dashboard's tests."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

T0 = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)
HOURS = 3
NICS = 48  # 12 hosts x 4: each NIC's 3 hours (10,800 rows) span more than a granule (8,192 rows)
HOSTS = 64  # heartbeats every 2 s: each host's 5,400 rows share granules with its neighbours'


def grow(client: Any) -> None:
    """A long job, loaded in the engine: HOURS of NICs at 1 Hz and heartbeats every 2 s, merged into one part."""
    secs = HOURS * 3600
    start = f"toDateTime64('{T0:%Y-%m-%d %H:%M:%S}', 3, 'UTC')"
    client.command(f"""INSERT INTO nic_counters (event_id, job_id, host, device, port, link, ts, tx_bytes, rx_bytes,
                         tx_bps, rx_bps, interval_s)
        SELECT concat('n', toString(number)), 'long', concat('h', toString(intDiv(number % {NICS}, 4))),
               concat('mlx5_', toString(number % 4)), 1, 'rdma', {start} + toIntervalSecond(intDiv(number, {NICS})),
               number, number, 5e9, 5e9, 1.0
        FROM numbers({NICS * secs})""")
    client.command(f"""INSERT INTO heartbeats (event_id, job_id, host, ts, interval_s, procs_total, procs_running, gpus)
        SELECT concat('b', toString(number)), 'long', concat('h', toString(number % {HOSTS})),
               {start} + toIntervalSecond(2 * intDiv(number, {HOSTS})), 2.0, 8, 8, 8
        FROM numbers({HOSTS * secs // 2})""")
    client.command("OPTIMIZE TABLE nic_counters FINAL")
    client.command("OPTIMIZE TABLE heartbeats FINAL")


def selected(client: Any, sql: str, params: dict[str, Any],
             tables: tuple[str, ...] = ("nic_counters", "heartbeats")) -> list[tuple[int, int]]:
    """(granules selected, granules) of each read of `sql` from one of `tables`, as the primary key left them."""
    plan = "\n".join(str(r[0]) for r in client.query(f"EXPLAIN indexes = 1 {sql}", parameters=params).result_rows)
    reads = re.split(r"ReadFromMergeTree", plan)[1:]
    out = []
    for read in reads:
        if not re.match(rf" \(\w+\.({'|'.join(tables)})\)", read):
            continue
        pk = read[read.index("PrimaryKey"):]
        got = re.search(r"Granules: (\d+)/(\d+)", pk)
        assert got is not None, pk
        out.append((int(got.group(1)), int(got.group(2))))
    return out
