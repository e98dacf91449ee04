"""The detectors' raw window reads as a 10,000-GPU job grows old: the minute-first layout vs the one before it.

nic_counters and heartbeats sort by (job_id, minute, host, ...) since migration 0198; before, by (job_id, host, ...).
This grows one job of `--hosts` hosts (4 NICs at 1 Hz, a heartbeat every 2 s) in the engine (INSERT ... SELECT FROM
numbers, into the real tables, rollups and all, and into copies sorted the old way), merges each table into one part
per day as background merges would, and at each age times every detector query that reads those two tables over a
window ending now: its CPU seconds per call (the process's, the engine runs in it) and the granules its primary key
selected; and the dashboard's host page (one host over the last hour), which the old layout served from the host's
own rows. The old layout is read with the old conditions (no minute bounds); the new one with the queries as they are.

    python bench/long_job_reads.py [--hosts 1250] [--ages 10,60,180] [--no-append]
"""

from __future__ import annotations

import argparse
import re
import resource
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from analyzer_common import append_results, machine_info

from vigil.analyzer.detect import flap, hang, heartbeat, quiet, traffic
from vigil.analyzer.detect.base import AT, RAW_WINDOW, ch_time
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.dashboard.queries import host as host_page
from vigil.dashboard.queries.window import T0 as PAGE_T0
from vigil.dashboard.queries.window import T1 as PAGE_T1
from vigil.dashboard.tables import HEARTBEATS, NIC_COUNTERS

T0 = datetime(2026, 11, 20, 0, 0, tzinfo=UTC)
OLD = {"nic_counters": "(job_id, host, device, ts, event_id)", "heartbeats": "(job_id, host, ts, event_id)"}
PAGE_BOUNDS = (NIC_COUNTERS.buckets(PAGE_T0, PAGE_T1), HEARTBEATS.buckets(PAGE_T0, PAGE_T1))


def page(at: datetime) -> dict[str, Any]:
    """The host page's parameters: one host, the hour before `at`, minute buckets."""
    t1 = int(at.timestamp() * 1000)
    return dict(host="h617", t0=t1 - 3_600_000, t1=t1, bucket=60)


def grow(c: Any, hosts: int, s0: int, s1: int, tables: dict[str, str]) -> None:
    """Seconds [s0, s1) of the job into `tables` (kind -> table), ten minutes per insert like a stream's parts."""
    start = f"toDateTime64('{T0:%Y-%m-%d %H:%M:%S}', 3, 'UTC')"
    nics = hosts * 4
    for a in range(s0, s1, 600):
        b = min(a + 600, s1)
        c.command(f"""INSERT INTO {tables['nic']} (event_id, job_id, host, device, port, link, ts, tx_bytes, rx_bytes,
                                                     tx_bps, rx_bps, interval_s)
            SELECT concat('n', toString(number)), 'long', concat('h', toString(intDiv(number % {nics}, 4))),
                   concat('mlx5_', toString(number % 4)), 1, 'rdma',
                   {start} + toIntervalMillisecond(intDiv(number, {nics}) * 1000 + number % 977),
                   number, number, 5e9 + number % 1000, 5e9, 1.0
            FROM numbers({a * nics}, {(b - a) * nics})""")
        c.command(f"""INSERT INTO {tables['hb']} (event_id, job_id, host, ts, interval_s, procs_total, procs_running,
                                                    gpus)
            SELECT concat('b', toString(number)), 'long', concat('h', toString(number % {hosts})),
                   {start} + toIntervalMillisecond(2000 * intDiv(number, {hosts}) + number % 1999), 2.0, 8, 8, 8
            FROM numbers({a * hosts // 2}, {(b - a) * hosts // 2})""")


def granules(c: Any, sql: str, params: dict[str, Any]) -> str:
    plan = "\n".join(str(r[0]) for r in c.query(f"EXPLAIN indexes = 1 {sql}", parameters=params).result_rows)
    out = []
    for read in plan.split("ReadFromMergeTree")[1:]:
        if re.match(r" \(\w+\.(nic_counters|heartbeats)", read) and "PrimaryKey" in read:
            got = re.search(r"Granules: (\d+)/(\d+)", read[read.index("PrimaryKey"):])
            if got:
                out.append(f"{got.group(1)}/{got.group(2)}")
    return ", ".join(out)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def per_call(c: Any, sql: str, params: dict[str, Any], n: int = 3) -> float:
    c.query(sql, parameters=params)
    c0 = cpu()
    for _ in range(n):
        c.query(sql, parameters=params)
    return (cpu() - c0) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=1250)
    ap.add_argument("--ages", default="10,60,180", help="job ages in minutes, ascending")
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    ages = [int(a) for a in args.ages.split(",")]
    c = connect(f"chdb://{tempfile.mkdtemp(prefix='vigil-bench-long-')}", database="vigil")
    migrate_all(c, 3650)
    for table, key in OLD.items():
        c.command(f"CREATE TABLE {table}_old AS {table} ENGINE = ReplacingMergeTree PARTITION BY toDate(ts) "
                  f"ORDER BY {key}")
    queries: dict[str, tuple[str, Callable[[datetime], dict[str, Any]]]] = {
        "traffic_stall NIC rates (130 s)": (traffic.NIC_SQL, lambda at: dict(
            zero=1e3, active=1e6, recent=ch_time(at - timedelta(seconds=10)), quiet=[],
            lo=ch_time(at - timedelta(seconds=130)))),
        "job quiet series (300 s)": (quiet.SERIES_SQL, lambda at: dict(lo=ch_time(at - timedelta(seconds=300)))),
        "nic_flap (180 s; granules of its main read)": (flap.SQL, lambda at: dict(frac=0.1, busy=1e6,
                                                                   lo=ch_time(at - timedelta(seconds=180)))),
        "host beats (600 s)": (heartbeat.SQL, lambda at: dict(
            lo=ch_time(at - timedelta(seconds=heartbeat.LOOKBACK_S)), miss=3.0,
            run_lo=ch_time(at - timedelta(seconds=60)))),
        "hang: hosts alive (60 s)": (hang.ALIVE_SQL, lambda at: dict(lo=ch_time(at - timedelta(seconds=60)))),
        "dashboard host page: one host's NICs, last hour": (host_page.NIC_SQL, page),
        "dashboard host page: its heartbeats, last hour": (host_page.HEARTBEATS_SQL, page),
    }
    rows = []
    done = 0
    for age in ages:
        t = time.perf_counter()
        grow(c, args.hosts, done * 60, age * 60, {"nic": "nic_counters", "hb": "heartbeats"})
        grow(c, args.hosts, done * 60, age * 60, {"nic": "nic_counters_old", "hb": "heartbeats_old"})
        for table in (*OLD, *(f"{t}_old" for t in OLD)):
            c.command(f"OPTIMIZE TABLE {table} FINAL")
        done = age
        stored = c.query("SELECT count() FROM nic_counters").result_rows[0][0]
        print(f"{age} min: {stored:,} NIC rows, grown and merged in {time.perf_counter() - t:.0f} s", flush=True)
        at = T0 + timedelta(minutes=age) - timedelta(seconds=5)
        for name, (sql, extra) in queries.items():
            params = {"job": "long", "at": ch_time(at), **extra(at)}
            old_sql = (sql.replace(RAW_WINDOW, f"ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT}")
                       .replace(PAGE_BOUNDS[0], "1").replace(PAGE_BOUNDS[1], "1")
                       .replace("FROM nic_counters", "FROM nic_counters_old").replace("FROM heartbeats", "FROM heartbeats_old"))
            assert old_sql != sql
            old_cpu, new_cpu = per_call(c, old_sql, params), per_call(c, sql, params)
            rows.append(f"| {age} | {stored:,} | {name} | {granules(c, old_sql, params)} | {old_cpu * 1000:.0f} | "
                        f"{granules(c, sql, params)} | {new_cpu * 1000:.0f} |")
            print(rows[-1], flush=True)
    body = "\n".join([
        machine_info(), "",
        f"One job of {args.hosts:,} hosts ({args.hosts * 8:,} GPUs): {args.hosts * 4:,} NICs at 1 Hz, a heartbeat per host "
        "every 2 s, grown in the engine into the real tables (rollups and all) and into copies sorted the old way, "
        "each merged into one part per day at every age; each query's window ends 5 s before the newest sample.", "",
        "| job age min | NIC rows | detector read | old layout: granules selected | old: CPU ms per call | "
        "minute first: granules selected | minute first: CPU ms per call |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows, "",
        "Command: `python bench/long_job_reads.py" + (f" --hosts {args.hosts}" if args.hosts != 1250 else "")
        + (f" --ages {args.ages}" if args.ages != "10,60,180" else "") + "`.",
    ])
    print(body)
    if not args.no_append:
        append_results("Detector window reads on a long job: minute-first raw tables (issue 26)", body)


if __name__ == "__main__":
    main()
