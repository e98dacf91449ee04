"""Pure processors: one event -> the rows it becomes, per ClickHouse table.

`process(event)` returns `[(table, row), ...]` with rows ordered as `COLUMNS[table]`.
No I/O here: the writer, the benchmarks and the tests share these functions.
A heartbeat becomes one `heartbeats` row and one `gpu_stats` row per GPU; a job
registration one `jobs` row and one `job_ranks` row per rank.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from vigil.contract import (
    Alert,
    CollectiveTrace,
    Event,
    Heartbeat,
    JobRegistered,
    LogLine,
    NicCounters,
    ProcessExit,
    StepTiming,
)

Row = tuple[Any, ...]
TableRow = tuple[str, Row]

COLUMNS: dict[str, tuple[str, ...]] = {
    "jobs": ("job_id", "ts", "event_id", "name", "world_size", "tp", "pp", "dp", "gpus_per_host", "gpu_model",
             "gpu_peak_tflops", "model_flops_per_step", "hosts"),
    "job_ranks": ("job_id", "rank", "host", "local_rank", "dp", "tp", "pp", "ts"),
    "step_timings": ("event_id", "job_id", "host", "rank", "local_rank", "world_size", "dp", "tp", "pp", "step",
                     "ts", "step_ms", "phases", "tokens", "tflops", "mfu", "failed", "dropped"),
    "heartbeats": ("event_id", "job_id", "host", "ts", "ip", "pod", "node", "agent_version", "uptime_s",
                   "interval_s", "procs_total", "procs_running", "gpus", "gpu_util_avg", "gpu_temp_max",
                   "gpu_ecc_uncorrected", "gpus_throttled", "dropped_events", "spooled_events"),
    "gpu_stats": ("event_id", "job_id", "host", "gpu", "ts", "name", "util_pct", "mem_used_mib", "temp_c",
                  "power_w", "sm_clock_mhz", "throttle_reasons", "ecc_uncorrected"),
    "nic_counters": ("event_id", "job_id", "host", "device", "port", "link", "ts", "tx_bytes", "rx_bytes",
                     "tx_bps", "rx_bps", "interval_s"),
    "log_lines": ("event_id", "job_id", "host", "ts", "rank", "local_rank", "stream", "category", "severity",
                  "message", "xid", "repeats"),
    "process_exits": ("event_id", "job_id", "host", "ts", "rank", "local_rank", "pid", "exit_code", "signal",
                      "summary", "traceback"),
    "collective_traces": ("event_id", "job_id", "host", "rank", "ts", "dumped_at", "process_groups",
                          "last_started_seq", "last_completed_seq", "entries"),
    "alert_events": ("event_id", "ts", "job_id", "host", "fingerprint", "alert", "subject", "status", "severity",
                     "summary", "first_seen", "last_seen", "evidence"),
}

_RUNNING = {"running", "sleeping", "disk-sleep", "R", "S", "D"}


def _step(e: StepTiming) -> list[TableRow]:
    c = e.coords
    return [("step_timings", (e.event_id, e.job_id, e.host, e.rank, e.local_rank, e.world_size, c.dp, c.tp, c.pp,
                              e.step, e.ts, e.step_ms, dict(e.phases), e.tokens, e.tflops, e.mfu, int(e.failed),
                              e.dropped))]


def _heartbeat(e: Heartbeat) -> list[TableRow]:
    utils = [g.util_pct for g in e.gpus if g.util_pct is not None]
    temps = [g.temp_c for g in e.gpus if g.temp_c is not None]
    running = sum(1 for p in e.processes if p.status in _RUNNING)
    rows: list[TableRow] = [("heartbeats", (
        e.event_id, e.job_id, e.host, e.ts, e.ip, e.pod, e.node, e.agent_version, e.uptime_s, e.interval_s,
        len(e.processes), running, len(e.gpus), sum(utils) / len(utils) if utils else None,
        max(temps) if temps else None, sum(g.ecc_uncorrected or 0 for g in e.gpus),
        sum(1 for g in e.gpus if g.throttle_reasons), e.dropped_events, e.spooled_events))]
    for g in e.gpus:
        rows.append(("gpu_stats", (e.event_id, e.job_id, e.host, g.index, e.ts, g.name, g.util_pct, g.mem_used_mib,
                                   g.temp_c, g.power_w, g.sm_clock_mhz, list(g.throttle_reasons),
                                   g.ecc_uncorrected)))
    return rows


def _nic(e: NicCounters) -> list[TableRow]:
    return [("nic_counters", (e.event_id, e.job_id, e.host, e.device, e.port, e.link, e.ts, e.tx_bytes,
                              e.rx_bytes, e.tx_bps, e.rx_bps, e.interval_s))]


def _log(e: LogLine) -> list[TableRow]:
    return [("log_lines", (e.event_id, e.job_id, e.host, e.ts, e.rank, e.local_rank, e.stream, e.category,
                           e.severity, e.message, e.xid, e.repeats))]


def _exit(e: ProcessExit) -> list[TableRow]:
    return [("process_exits", (e.event_id, e.job_id, e.host, e.ts, e.rank, e.local_rank, e.pid, e.exit_code,
                               e.signal or "", e.summary, e.traceback))]


def _collective(e: CollectiveTrace) -> list[TableRow]:
    entries = json.dumps([x.model_dump(mode="json") for x in e.entries])
    return [("collective_traces", (e.event_id, e.job_id, e.host, e.rank, e.ts, e.dumped_at, dict(e.process_groups),
                                   dict(e.last_started_seq), dict(e.last_completed_seq), entries))]


def _job(e: JobRegistered) -> list[TableRow]:
    hosts = sorted({r.host for r in e.ranks})
    rows: list[TableRow] = [("jobs", (e.job_id, e.ts, e.event_id, e.name, e.world_size, e.tp, e.pp, e.dp,
                                      e.gpus_per_host, e.gpu_model, e.gpu_peak_tflops, e.model_flops_per_step,
                                      hosts))]
    for r in e.ranks:
        rows.append(("job_ranks", (e.job_id, r.rank, r.host, r.local_rank, r.coords.dp, r.coords.tp, r.coords.pp,
                                   e.ts)))
    return rows


def _alert(e: Alert) -> list[TableRow]:
    return [("alert_events", (e.event_id, e.ts, e.job_id, e.host, e.fingerprint, e.alert, e.subject, e.status,
                              e.severity, e.summary, e.first_seen, e.last_seen,
                              json.dumps(e.evidence, default=str, sort_keys=True)))]


_BY_TYPE: dict[type[Event], Callable[[Any], list[TableRow]]] = {
    StepTiming: _step, Heartbeat: _heartbeat, NicCounters: _nic, LogLine: _log, ProcessExit: _exit,
    CollectiveTrace: _collective, JobRegistered: _job, Alert: _alert,
}


def process(event: Event) -> list[TableRow]:
    """The rows `event` becomes; [] for kinds the analyzer does not store (recovery, checkpoints)."""
    fn = _BY_TYPE.get(type(event))
    return fn(event) if fn is not None else []
