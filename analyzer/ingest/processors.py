"""Pure processors: one event -> the rows it becomes, per ClickHouse table.

`process(event)` returns `[(table, row), ...]` where each row is a dict keyed by column
name: the writer inserts by those names, and the test suite checks every table's rows
against the migrated schema and every like-named field against its event. No I/O here: the writer, the benchmarks and the tests share these functions.
A heartbeat becomes one `heartbeats` row and one `gpu_stats` row per GPU; a job
registration one `jobs` row and one `job_ranks` row per rank; the recovery controller's
actions, outcomes and its agents' `member` reports one row each (`recovery_*`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from vigil.contract import (
    Alert,
    Checkpoint,
    CollectiveTrace,
    Event,
    Heartbeat,
    JobRegistered,
    LogLine,
    Member,
    NicCounters,
    Outcome,
    ProcessExit,
    RecoveryAction,
    StepTiming,
)

Row = dict[str, Any]
"""One table row, keyed by column name (the writer inserts by these names)."""
TableRow = tuple[str, Row]

_RUNNING = {"running", "sleeping", "disk-sleep", "R", "S", "D"}


def _step(e: StepTiming) -> list[TableRow]:
    c = e.coords
    return [("step_timings", {
        "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "rank": e.rank, "local_rank": e.local_rank,
        "world_size": e.world_size, "dp": c.dp, "tp": c.tp, "pp": c.pp, "step": e.step, "ts": e.ts,
        "step_ms": e.step_ms, "phases": dict(e.phases), "tokens": e.tokens, "tflops": e.tflops, "mfu": e.mfu,
        "failed": int(e.failed), "dropped": e.dropped})]


def _heartbeat(e: Heartbeat) -> list[TableRow]:
    utils = [g.util_pct for g in e.gpus if g.util_pct is not None]
    temps = [g.temp_c for g in e.gpus if g.temp_c is not None]
    rows: list[TableRow] = [("heartbeats", {
        "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "ts": e.ts, "ip": e.ip, "pod": e.pod,
        "node": e.node, "agent_version": e.agent_version, "uptime_s": e.uptime_s, "interval_s": e.interval_s,
        "procs_total": len(e.processes), "procs_running": sum(1 for p in e.processes if p.status in _RUNNING),
        "gpus": len(e.gpus), "gpu_util_avg": sum(utils) / len(utils) if utils else None,
        "gpu_temp_max": max(temps) if temps else None,
        "gpu_ecc_uncorrected": sum(g.ecc_uncorrected or 0 for g in e.gpus),
        "gpus_throttled": sum(1 for g in e.gpus if g.throttle_reasons),
        "dropped_events": e.dropped_events, "spooled_events": e.spooled_events})]
    for g in e.gpus:
        rows.append(("gpu_stats", {
            "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "gpu": g.index, "ts": e.ts, "name": g.name,
            "util_pct": g.util_pct, "mem_used_mib": g.mem_used_mib, "temp_c": g.temp_c, "power_w": g.power_w,
            "sm_clock_mhz": g.sm_clock_mhz, "throttle_reasons": list(g.throttle_reasons),
            "ecc_uncorrected": g.ecc_uncorrected}))
    return rows


def _nic(e: NicCounters) -> list[TableRow]:
    return [("nic_counters", {
        "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "device": e.device, "port": e.port,
        "link": e.link, "ts": e.ts, "tx_bytes": e.tx_bytes, "rx_bytes": e.rx_bytes, "tx_bps": e.tx_bps,
        "rx_bps": e.rx_bps, "interval_s": e.interval_s})]


def _log(e: LogLine) -> list[TableRow]:
    return [("log_lines", {
        "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "ts": e.ts, "rank": e.rank,
        "local_rank": e.local_rank, "stream": e.stream, "category": e.category, "severity": e.severity,
        "message": e.message, "xid": e.xid, "repeats": e.repeats})]


def _exit(e: ProcessExit) -> list[TableRow]:
    return [("process_exits", {
        "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "ts": e.ts, "rank": e.rank,
        "local_rank": e.local_rank, "pid": e.pid, "exit_code": e.exit_code, "signal": e.signal or "",
        "summary": e.summary, "traceback": e.traceback})]


def _collective(e: CollectiveTrace) -> list[TableRow]:
    return [("collective_traces", {
        "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "rank": e.rank, "ts": e.ts,
        "dumped_at": e.dumped_at, "process_groups": dict(e.process_groups),
        "last_started_seq": dict(e.last_started_seq), "last_completed_seq": dict(e.last_completed_seq),
        "entries": json.dumps([x.model_dump(mode="json") for x in e.entries])})]


def _job(e: JobRegistered) -> list[TableRow]:
    rows: list[TableRow] = [("jobs", {
        "job_id": e.job_id, "ts": e.ts, "event_id": e.event_id, "name": e.name, "world_size": e.world_size,
        "tp": e.tp, "pp": e.pp, "dp": e.dp, "gpus_per_host": e.gpus_per_host, "gpu_model": e.gpu_model,
        "gpu_peak_tflops": e.gpu_peak_tflops, "model_flops_per_step": e.model_flops_per_step,
        "hosts": sorted({r.host for r in e.ranks})})]
    for r in e.ranks:
        rows.append(("job_ranks", {
            "job_id": e.job_id, "rank": r.rank, "host": r.host, "local_rank": r.local_rank, "dp": r.coords.dp,
            "tp": r.coords.tp, "pp": r.coords.pp, "ts": e.ts}))
    return rows


def _alert(e: Alert) -> list[TableRow]:
    return [("alert_events", {
        "event_id": e.event_id, "ts": e.ts, "job_id": e.job_id, "host": e.host, "fingerprint": e.fingerprint,
        "alert": e.alert, "subject": e.subject, "status": e.status, "severity": e.severity, "summary": e.summary,
        "first_seen": e.first_seen, "last_seen": e.last_seen,
        "evidence": json.dumps(e.evidence, default=str, sort_keys=True)})]


def _checkpoint(e: Checkpoint) -> list[TableRow]:
    return [("checkpoints", {
        "event_id": e.event_id, "ts": e.ts, "job_id": e.job_id, "host": e.host, "rank": e.rank, "step": e.step,
        "phase": e.phase, "path": e.path, "blocked_ms": e.blocked_ms, "duration_ms": e.duration_ms,
        "bytes": e.bytes, "error": e.error, "dropped": e.dropped})]


def _recovery(e: RecoveryAction) -> list[TableRow]:
    return [("recovery_actions", {
        "event_id": e.event_id, "ts": e.ts, "job_id": e.job_id, "host": e.host, "action": e.action,
        "target": e.target, "status": e.status, "reason": e.reason, "alert_fingerprint": e.alert_fingerprint,
        "details": json.dumps(e.details, default=str, sort_keys=True), "incident_id": e.incident_id,
        "actor": e.actor, "command_id": e.command_id, "generation": e.generation, "started_at": e.started_at,
        "duration_ms": e.duration_ms, "dry_run": int(e.dry_run)})]


def _outcome(e: Outcome) -> list[TableRow]:
    return [("recovery_outcomes", {
        "event_id": e.event_id, "ts": e.ts, "job_id": e.job_id, "incident_id": e.incident_id, "result": e.result,
        "category": e.category, "cause": e.cause, "first_sign": e.first_sign, "detected": e.detected,
        "resumed_at": e.resumed_at, "detect_s": e.detect_s, "decide_s": e.decide_s, "pause_s": e.pause_s,
        "diagnose_s": e.diagnose_s, "restart_s": e.restart_s, "checkpoint_load_s": e.checkpoint_load_s,
        "total_s": e.total_s, "checkpoint_step": e.checkpoint_step, "last_step": e.last_step,
        "steps_lost": e.steps_lost, "first_step": e.first_step, "generation": e.generation,
        "cordoned": list(e.cordoned), "hosts": list(e.hosts), "reason": e.reason})]


def _member(e: Member) -> list[TableRow]:
    return [("recovery_members", {
        "event_id": e.event_id, "ts": e.ts, "job_id": e.job_id, "host": e.host, "state": e.state, "since": e.since,
        "generation": e.generation, "node_rank": e.node_rank, "spare": int(e.spare), "started_at": e.started_at,
        "first_step": e.first_step, "first_step_at": e.first_step_at, "last_step": e.last_step,
        "last_step_at": e.last_step_at, "steps": e.steps, "step_ms": e.step_ms, "reason": e.reason})]


_BY_TYPE: dict[type[Event], Callable[[Any], list[TableRow]]] = {
    StepTiming: _step, Heartbeat: _heartbeat, NicCounters: _nic, LogLine: _log, ProcessExit: _exit,
    CollectiveTrace: _collective, JobRegistered: _job, Alert: _alert, Checkpoint: _checkpoint,
    RecoveryAction: _recovery, Outcome: _outcome, Member: _member,
}


def process(event: Event) -> list[TableRow]:
    """The rows `event` becomes; [] for kinds the analyzer does not store."""
    fn = _BY_TYPE.get(type(event))
    return fn(event) if fn is not None else []
