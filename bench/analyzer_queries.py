"""Query latency of each detector and of a heatmap over 1024 hosts x 8 GPUs x 1 hour of steps.

Data is generated inside ClickHouse (INSERT ... SELECT FROM numbers) into the real
raw tables, so the materialised rollups fill exactly as under ingest: 1800 steps of
2 s (one hour) x 8192 ranks = 14.7M step rows, 7.4M NIC samples (2 NICs, 1 Hz),
1.8M heartbeats. Prints a markdown table and adds it to bench/RESULTS.md (`--no-append`: print only).

    python bench/analyzer_queries.py [--hosts 1024] [--steps 1800] [--no-append]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta

from analyzer_common import append_results, machine_info

from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.detect.base import EvalContext
from vigil.analyzer.engine import DETECTORS
from vigil.analyzer.settings import AnalyzerSettings
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def generate(client: object, hosts: int, gpus: int, steps: int, step_s: float) -> dict[str, float]:
    c = client
    ranks = hosts * gpus
    t = {}
    start = time.perf_counter()
    c.command(f"""
        INSERT INTO step_timings (event_id, job_id, host, rank, local_rank, world_size, dp, tp, pp, step, ts, step_ms,
                                  phases, mfu, failed, dropped)
        SELECT toString(number), 'bench', concat('h', leftPad(toString(intDiv(number % {ranks}, {gpus})), 4, '0')),
               number % {ranks}, number % {gpus}, {ranks}, intDiv(number % {ranks}, {gpus}), number % {gpus}, 0,
               intDiv(number, {ranks}) AS s,
               toDateTime64('{T0:%Y-%m-%d %H:%M:%S}', 3, 'UTC') + toIntervalMillisecond(toUInt64((s + 1) * {step_s * 1000})),
               2000, map('forward', 600 * (1 + (rand(1) % 1000) / 25000), 'backward', 1000 * (1 + (rand(2) % 1000) / 25000),
                         'optimizer', 120.0, 'comm', 240.0), 0.42, 0, 0
        FROM numbers({ranks * steps}) SETTINGS max_insert_block_size = 1048576""")  # type: ignore[attr-defined]
    t["steps_insert_s"] = time.perf_counter() - start
    seconds = int(steps * step_s)
    start = time.perf_counter()
    c.command(f"""
        INSERT INTO nic_counters (event_id, job_id, host, device, port, link, ts, tx_bytes, rx_bytes, tx_bps, rx_bps, interval_s)
        SELECT concat('n', toString(number)), 'bench', concat('h', leftPad(toString(intDiv(number % {hosts * 2}, 2)), 4, '0')),
               concat('mlx5_', toString(number % 2)), 1, 'rdma',
               toDateTime64('{T0:%Y-%m-%d %H:%M:%S}', 3, 'UTC') + toIntervalSecond(intDiv(number, {hosts * 2})),
               0, 0, 6e9 * (1 + (rand(3) % 100) / 1000), 6e9, 1.0
        FROM numbers({hosts * 2 * seconds})""")  # type: ignore[attr-defined]
    c.command(f"""
        INSERT INTO heartbeats (event_id, job_id, host, ts, ip, pod, node, agent_version, uptime_s, interval_s, procs_total,
                                procs_running, gpus, gpu_ecc_uncorrected, gpus_throttled, dropped_events, spooled_events)
        SELECT concat('b', toString(number)), 'bench', concat('h', leftPad(toString(number % {hosts}), 4, '0')),
               toDateTime64('{T0:%Y-%m-%d %H:%M:%S}', 3, 'UTC') + toIntervalSecond(2 * intDiv(number, {hosts})),
               '', '', '', '', 0, 2.0, {gpus}, {gpus}, {gpus}, 0, 0, 0, 0
        FROM numbers({hosts * seconds // 2})""")  # type: ignore[attr-defined]
    t["nic_heartbeat_insert_s"] = time.perf_counter() - start
    return t


HEATMAP = """
SELECT host, intDiv(window, 12) AS minute, sum(sum_ms) / sum(n) AS mean_ms, max(max_ms) AS worst_ms
FROM phase_host_windows WHERE job_id = 'bench' AND phase = 'forward'
GROUP BY host, minute ORDER BY host, minute
"""


def timed(fn: object, repeat: int = 5) -> tuple[float, float]:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        runs.append(time.perf_counter() - start)
    return statistics.median(runs) * 1000, max(runs) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=1024)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--steps", type=int, default=1800)
    ap.add_argument("--step-s", type=float, default=2.0)
    ap.add_argument("--no-append", dest="append", action="store_false", help="print only; do not add to bench/RESULTS.md")
    args = ap.parse_args()
    path = tempfile.mkdtemp(prefix="vigil-bench-q-")
    client = connect(f"chdb://{path}", database="vigil")
    migrate_all(client, 3650)
    gen = generate(client, args.hosts, args.gpus, args.steps, args.step_s)
    rows = client.query("SELECT count() FROM step_timings").result_rows[0][0]
    at = T0 + timedelta(seconds=args.steps * args.step_s)
    ctx = EvalContext(client=client, settings=AnalyzerSettings(), job="bench", at=at, firing=AlertBook().firing_subjects("bench"))
    lines = [f"Data: {rows:,} step rows ({args.hosts} hosts x {args.gpus} GPUs x {args.steps} steps of {args.step_s:g} s), "
             f"generated in {gen['steps_insert_s']:.1f} s (rollups included); NIC + heartbeats {gen['nic_heartbeat_insert_s']:.1f} s.",
             "", "| query | median ms | max ms (5 runs) | rows |", "| --- | --- | --- | --- |"]
    heat = client.query(HEATMAP).result_rows
    med, worst = timed(lambda: client.query(HEATMAP))
    lines.append(f"| heatmap: forward mean per host x minute, 1 h | {med:.0f} | {worst:.0f} | {len(heat):,} |")
    for d in DETECTORS:
        found = d.detect(ctx)
        med, worst = timed(lambda d=d: d.detect(ctx))  # type: ignore[misc]
        lines.append(f"| detector {d.name} (as of the last step) | {med:.0f} | {worst:.0f} | {len(found)} findings |")
    text = "\n".join(lines)
    print(text)
    if args.append:
        append_results("Analyzer query latency (1024 hosts x 8 GPUs x 1 h)", machine_info() + "\n\n" + text + "\n\n"
                       "Command: `python bench/analyzer_queries.py`. Target < 1 s each.")


if __name__ == "__main__":
    main()
