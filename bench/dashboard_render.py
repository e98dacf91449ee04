"""Time to render each dashboard page for a 1024-host x 8-GPU job with one hour of telemetry.

Data goes straight into an embedded ClickHouse (chdb) with INSERT ... SELECT FROM numbers(),
into the raw tables, so the analyzer's rollup views fill exactly as with real ingest:
600 steps of 6 s (4.9 M step_timings rows, one straggler host 10% slow in `forward`),
heartbeats and GPU readings every 10 s, 8 NICs per host every 10 s (one NIC stopped for
two minutes), some log lines and alert events. Each page is then rendered server-side
exactly as its Dash callback does (queries + figures + components, serialised to JSON);
best and median of 5. Target: < 1 s per page.

    python bench/dashboard_render.py [--hosts 1024] [--steps 600] [--keep DIR] [--no-append]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import plotly.utils

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.dashboard.app import RENDERERS
from vigil.dashboard.callbacks import render_page
from vigil.dashboard.settings import DashboardSettings
from vigil.dashboard.store import Store

JOB = "bench-1024"
GPUS = 8
PP = 4
STEP_S = 6
NICS = 8
STRAGGLER = 517
STALL_HOST, STALL_NIC = 900, 3
SAMPLE_S = 10
TARGET_S = 1.0


def host_expr(h: str) -> str:
    return f"concat('bench-host-', leftPad(toString({h}), 4, '0'))"


def generate(client: Any, hosts: int, steps: int, start: datetime) -> dict[str, float]:
    """Fill the raw tables; returns seconds per table."""
    t0 = start.strftime("%Y-%m-%d %H:%M:%S")
    world, dp = hosts * GPUS, hosts // PP
    took: dict[str, float] = {}

    def run(name: str, sql: str) -> None:
        t = time.perf_counter()
        client.command(sql)
        took[name] = took.get(name, 0.0) + time.perf_counter() - t

    run("jobs", f"""INSERT INTO jobs (job_id, ts, event_id, name, world_size, tp, pp, dp, gpus_per_host, gpu_model,
        gpu_peak_tflops, model_flops_per_step, hosts)
        SELECT '{JOB}', toDateTime64('{t0}', 3, 'UTC'), 'bench-job', 'benchmark job', {world}, {GPUS}, {PP}, {dp},
               {GPUS}, 'H100', 989, 1e18, arrayMap(h -> {host_expr('h')}, range({hosts}))""")
    run("job_ranks", f"""INSERT INTO job_ranks SELECT '{JOB}', number, {host_expr('intDiv(number, 8)')}, number % 8,
        intDiv(number, 8) % {dp}, number % 8, intDiv(number, {8 * dp}), toDateTime64('{t0}', 3, 'UTC')
        FROM numbers({world})""")
    chunk = 50
    for s0 in range(0, steps, chunk):
        n = min(chunk, steps - s0)
        run("step_timings", f"""INSERT INTO step_timings (event_id, job_id, host, rank, local_rank, world_size, dp, tp,
            pp, step, ts, step_ms, phases, tokens, tflops, mfu, failed, dropped)
            SELECT concat('s', toString(step), '-', toString(rank)), '{JOB}', {host_expr('h')}, rank, rank % 8, {world},
                   h % {dp}, rank % 8, intDiv(h, {dp}), step,
                   toDateTime64('{t0}', 3, 'UTC') + toIntervalMillisecond(step * {STEP_S * 1000} + rank % 997),
                   {STEP_S * 1000} * (1 + 0.01 * sin(step)),
                   map('forward', 1800 * (1 + 0.02 * (randCanonical() - 0.5)) * if(h = {STRAGGLER}, 1.1, 1),
                       'backward', 3100 * (1 + 0.02 * (randCanonical() - 0.5)),
                       'optimizer', 360 * (1 + 0.02 * (randCanonical() - 0.5)),
                       'comm', 700 * (1 + 0.02 * (randCanonical() - 0.5))),
                   512, 400, 0.41 * (1 - 0.01 * sin(step)), 0, 0
            FROM (SELECT number % {world} AS rank, intDiv(rank, 8) AS h, {s0} + intDiv(number, {world}) AS step
                  FROM numbers({n * world}))""")
    samples = steps * STEP_S // SAMPLE_S
    run("heartbeats", f"""INSERT INTO heartbeats (event_id, job_id, host, ts, ip, pod, node, agent_version, uptime_s,
        interval_s, procs_total, procs_running, gpus, gpu_util_avg, gpu_temp_max, gpu_ecc_uncorrected, gpus_throttled,
        dropped_events, spooled_events)
        SELECT concat('hb', toString(number)), '{JOB}', {host_expr('h')},
               toDateTime64('{t0}', 3, 'UTC') + toIntervalMillisecond(i * {SAMPLE_S * 1000} + h % 1000), '10.0.0.1',
               concat('pod-', toString(h)), {host_expr('h')}, 'bench', i * {SAMPLE_S}, {SAMPLE_S}, 8, 8, 8, 95, 70, 0, 0,
               0, 0
        FROM (SELECT number, number % {hosts} AS h, intDiv(number, {hosts}) AS i FROM numbers({samples * hosts}))""")
    run("gpu_stats", f"""INSERT INTO gpu_stats SELECT concat('hb', toString(intDiv(number, 8))), '{JOB}', {host_expr('h')},
        number % 8, toDateTime64('{t0}', 3, 'UTC') + toIntervalMillisecond(i * {SAMPLE_S * 1000} + h % 1000), 'H100',
        95 + 4 * (randCanonical() - 0.5), 61000, 62 + 6 * randCanonical(), 640, 1980,
        if(h = {STRAGGLER}, ['sw_thermal_slowdown'], []), 0
        FROM (SELECT number, intDiv(number, 8) % {hosts} AS h, intDiv(number, {8 * hosts}) AS i
              FROM numbers({samples * hosts * 8}))""")
    run("nic_counters", f"""INSERT INTO nic_counters (event_id, job_id, host, device, port, link, ts, tx_bytes,
        rx_bytes, tx_bps, rx_bps, interval_s)
        SELECT concat('n', toString(number)), '{JOB}', {host_expr('h')}, concat('mlx5_', toString(d)), 1, 'rdma',
               toDateTime64('{t0}', 3, 'UTC') + toIntervalMillisecond(i * {SAMPLE_S * 1000} + h % 1000), 0, 0,
               if(h = {STALL_HOST} AND d = {STALL_NIC} AND i * {SAMPLE_S} BETWEEN 1800 AND 1919, 0,
                  6e9 * (1 + 0.05 * (randCanonical() - 0.5))) AS tx,
               tx, {SAMPLE_S}
        FROM (SELECT number, number % {NICS} AS d, intDiv(number, {NICS}) % {hosts} AS h,
                     intDiv(number, {NICS * hosts}) AS i FROM numbers({samples * hosts * NICS}))""")
    run("log_lines", f"""INSERT INTO log_lines SELECT concat('l', toString(number)), '{JOB}', {host_expr('number % ' +
        str(hosts))}, toDateTime64('{t0}', 3, 'UTC') + toIntervalSecond(number % {steps * STEP_S}), 0, 0, 'stderr',
        if(number % 50 = 0, 'xid', 'nccl_warn'), if(number % 50 = 0, 'critical', 'warning'),
        'NCCL WARN benign line for the benchmark', NULL, 1 FROM numbers(20000)""")
    run("alert_events", f"""INSERT INTO alert_events (event_id, ts, job_id, host, fingerprint, alert, subject, status,
        severity, summary, first_seen, last_seen, evidence)
        SELECT concat('a', toString(number)), toDateTime64('{t0}', 3, 'UTC') + toIntervalSecond(number * 7),
               '{JOB}', {host_expr('number % 40')}, concat('{JOB}/straggler/', toString(number % 40)),
               'straggler', toString(number % 40), if(number % 3 = 0, 'resolved', 'firing'),
               ['warning', 'error', 'critical'][number % 3 + 1], 'benchmark alert',
               toDateTime64('{t0}', 3, 'UTC'), toDateTime64('{t0}', 3, 'UTC') + toIntervalSecond(number * 7), '{{}}'
        FROM numbers(400)""")
    return took


PAGES: list[tuple[str, str]] = [
    ("overview", "/overview"),
    ("heatmap (worst 48 x phases)", "/heatmap"),
    ("heatmap (all 1024 x phases)", "/heatmap?rows=all"),
    ("heatmap (worst 48 x step windows)", "/heatmap?view=window"),
    ("host", f"/host?host=bench-host-{STRAGGLER:04d}"),
    ("network (fleet)", "/network"),
    ("network (one host)", f"/network?host=bench-host-{STALL_HOST:04d}"),
    ("alerts", "/alerts"),
    ("3D view", "/parallel?phase=forward"),
]


def time_pages(store: Store, repeats: int) -> list[tuple[str, float, float, int, bool]]:
    settings = DashboardSettings()
    out = []
    for name, url in PAGES:
        path, _, query = url.partition("?")
        search = f"?job={JOB}" + (f"&{query}" if query else "")
        times, size, ok = [], 0, True
        for _ in range(repeats):
            t = time.perf_counter()
            body, _title = render_page(store, settings, RENDERERS, path, search)
            payload = json.dumps(body.to_plotly_json(), cls=plotly.utils.PlotlyJSONEncoder)
            times.append(time.perf_counter() - t)
            size = len(payload)
            ok = ok and "store-error" not in payload
        out.append((name, min(times), statistics.median(times), size, ok))
    return out


def machine() -> str:
    cpu = ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "")
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    import chdb

    return (f"`{platform.node()}`, {os.cpu_count()} CPUs ({cpu or 'unknown'}), {platform.platform()}, "
            f"Python {platform.python_version()}, chdb {chdb.__version__}; load average at start {load}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", help="chdb directory to reuse (data generated once)")
    ap.add_argument("--no-append", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args(argv)
    where = args.keep or tempfile.mkdtemp(prefix="vigil-bench-dash-")
    info = machine()
    client = connect(f"chdb://{os.path.abspath(where)}", database="bench")
    fresh = int(client.query("SELECT count() FROM system.tables WHERE database = 'bench' "
                             "AND name = 'step_timings'").result_rows[0][0]) == 0
    migrate_all(client, 3650)
    rows = int(client.query("SELECT count() FROM step_timings WHERE job_id = {j:String}",
                            parameters={"j": JOB}).result_rows[0][0])
    gen: dict[str, float] = {}
    if fresh or rows == 0:
        start = (datetime.now(UTC) - timedelta(seconds=args.steps * STEP_S + 60)).replace(microsecond=0)
        gen = generate(client, args.hosts, args.steps, start)
    counts = {t: int(client.query(f"SELECT count() FROM {t}").result_rows[0][0])
              for t in ("step_timings", "phase_host_windows", "heartbeats", "gpu_stats", "nic_counters",
                        "nic_windows", "alert_events")}
    results = time_pages(Store(client=client), args.repeats)
    lines = [f"| page | best s | median s | payload KB | < {TARGET_S:g} s |", "|---|---:|---:|---:|:---:|"]
    for name, best, med, size, ok in results:
        verdict = ("yes" if med < TARGET_S else "NO") if ok else "ERROR"
        lines.append(f"| {name} | {best:.3f} | {med:.3f} | {size / 1024:.0f} | {verdict} |")
    table = "\n".join(lines)
    data = (f"{args.hosts} hosts x {GPUS} GPUs (pp {PP}), {args.steps} steps of {STEP_S} s "
            f"({args.steps * STEP_S / 3600:.2f} h); rows: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    if gen:
        data += "; generated in " + ", ".join(f"{k} {v:.0f} s" for k, v in gen.items())
    print(data)
    print(table)
    if not args.no_append:
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        section = (f"\n## dashboard_render.py — {stamp}\n\nMachine: {info}.\n\nData: {data}.\n"
                   f"Each page rendered server-side as its Dash callback does (ClickHouse queries + figures + "
                   f"components, JSON-serialised), {args.repeats} runs.\n\n{table}\n")
        with open(Path(__file__).with_name("RESULTS.md"), "a", encoding="utf-8") as fh:
            fh.write(section)
    return 0 if all(ok and med < TARGET_S for _, _, med, _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
