"""Pure processors: one event -> the rows it becomes, per ClickHouse table.

`process(event)` returns `[(table, row), ...]` where each row is a dict keyed by column
name: the writer inserts by those names (column by column), and the test suite checks
every table's rows against the migrated schema and every like-named field against its
event. No I/O here: the writer, the benchmarks and the tests share these functions.
A heartbeat becomes one `heartbeats` row and one `gpu_stats` row per GPU; a job
registration one `jobs` row, one `job_ranks` row per rank and one `job_phase_kinds` row per
phase kind it declares; a Flight Recorder trace one
`collective_traces` row with its per-group tail (`pg_tail`) for the hang detector. The
recovery controller's (re)start of a job, when it begins, is a `job_registrations` row:
the detectors take it as the start of a new run (analyzer/detect/epoch.py), like a
registration. The controller's actions, outcomes and its agents' `member` reports are one row
each (`recovery_*`).

An event is either the pydantic model or its fast-path mirror (`vigil.contract.fastwire`,
same attribute names): processors read attributes only, so both give the same rows. The
writer builds steps' and NIC samples' rows a column at a time (`columns.BUILDERS`); those
builders must give exactly these rows (tests/analyzer/test_columns.py), so this stays the one
definition of a row.

Adding a kind = a row builder in `KINDS` (keyed by the event's `kind`) and a migration for
its table; `LOOKUP` names the column that bounds the look-up of stored event_ids in each
table with an `event_id` (the writer's exact check for late re-sends and re-reads), and
`RECENT` the high-volume kinds whose re-sends the writer first checks in memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from vigil.analyzer.incidents.flightrec import dumps_tail, tail_of
from vigil.contract import (
    Advice,
    Alert,
    Checkpoint,
    CollectiveTrace,
    Heartbeat,
    Incident,
    JobRegistered,
    LogLine,
    Member,
    NicCounters,
    Outcome,
    ProcessExit,
    RecoveryAction,
    StepTiming,
)
from vigil.contract.hotkinds import HOT_KINDS, FastHeartbeat, FastNic, FastStep, Ingestable
from vigil.contract.xid import decides, xid_entry

Row = dict[str, Any]
"""One table row, keyed by column name (the writer inserts by these names)."""
TableRow = tuple[str, Row]

_RUNNING = {"running", "sleeping", "disk-sleep", "R", "S", "D"}


def _step(e: StepTiming | FastStep) -> list[TableRow]:
    c = e.coords
    return [("step_timings", {
        "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "rank": e.rank, "local_rank": e.local_rank,
        "world_size": e.world_size, "dp": c.dp, "tp": c.tp, "pp": c.pp, "step": e.step, "ts": e.ts,
        "step_ms": e.step_ms, "phases": dict(e.phases), "phase_kinds": dict(e.phase_kinds), "tokens": e.tokens, "tflops": e.tflops, "mfu": e.mfu,
        "failed": int(e.failed), "dropped": e.dropped, "loss": e.loss, "grad_norm": e.grad_norm,
        "nonfinite": e.nonfinite, "update_ratio": e.update_ratio, "digest": e.digest})]


def _total(values: Iterable[float | None]) -> float | None:
    """The sum of the values given; None when none was (the agent could not read them)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _heartbeat(e: Heartbeat | FastHeartbeat) -> list[TableRow]:
    utils = [g.util_pct for g in e.gpus if g.util_pct is not None]
    temps = [g.temp_c for g in e.gpus if g.temp_c is not None]
    rows: list[TableRow] = [("heartbeats", {
        "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "ts": e.ts, "ip": e.ip, "pod": e.pod,
        "node": e.node, "agent_version": e.agent_version, "uptime_s": e.uptime_s, "interval_s": e.interval_s,
        "procs_total": len(e.processes), "procs_running": sum(1 for p in e.processes if p.status in _RUNNING),
        "procs_cpu_pct": _total(p.cpu_pct for p in e.processes), "procs_rss_mib": _total(p.rss_mib for p in e.processes),
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


def _nic(e: NicCounters | FastNic) -> list[TableRow]:
    return [("nic_counters", {
        "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "device": e.device, "port": e.port,
        "link": e.link, "ts": e.ts, "tx_bytes": e.tx_bytes, "rx_bytes": e.rx_bytes, "tx_bps": e.tx_bps,
        "rx_bps": e.rx_bps, "interval_s": e.interval_s})]


def _log(e: LogLine, verified: bool = True) -> list[TableRow]:
    """A hardware fact (source kernel, nvml, sysfs) its host's agent did not attest (`verified` False) is stored as
    what it is, a claim (`process`, no action); an Xid's action is the catalog's for its code, never the line's."""
    source = e.source if verified else "process"
    action = e.action.value if e.action is not None and decides(source) else ""
    if action and e.category == "xid" and e.xid is not None:
        action = xid_entry(e.xid).action.value
    return [("log_lines", {
        "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "ts": e.ts, "rank": e.rank,
        "local_rank": e.local_rank, "stream": e.stream, "category": e.category, "severity": e.severity,
        "message": e.message, "xid": e.xid, "repeats": e.repeats,
        "source": source, "action": action, "gpu_index": e.gpu_index})]


def _exit(e: ProcessExit) -> list[TableRow]:
    return [("process_exits", {
        "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "ts": e.ts, "rank": e.rank,
        "local_rank": e.local_rank, "pid": e.pid, "exit_code": e.exit_code, "signal": e.signal or "",
        "summary": e.summary, "traceback": e.traceback, "failed_at": e.failed_at, "launcher": int(e.launcher)})]


def _collective(e: CollectiveTrace) -> list[TableRow]:
    entries = [x.model_dump(mode="json") for x in e.entries]
    return [("collective_traces", {
        "event_id": e.event_id, "job_id": e.job_id, "host": e.host, "rank": e.rank, "ts": e.ts,
        "dumped_at": e.dumped_at, "process_groups": dict(e.process_groups),
        "last_started_seq": dict(e.last_started_seq), "last_completed_seq": dict(e.last_completed_seq),
        "entries": json.dumps(entries), "group_ranks": {k: list(v) for k, v in e.group_ranks.items()},
        "trigger": e.trigger, "step": e.step, "stack": e.stack, "pg_tail": dumps_tail(tail_of(entries))})]


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
    for phase, kind in e.phase_kinds.items():
        rows.append(("job_phase_kinds", {"job_id": e.job_id, "phase": phase, "source": "job", "phase_kind": kind,
                                         "ts": e.ts}))
    return rows


def _alert(e: Alert) -> list[TableRow]:
    return [("alert_events", {
        "event_id": e.event_id, "ts": e.ts, "job_id": e.job_id, "host": e.host, "fingerprint": e.fingerprint,
        "alert": e.alert, "subject": e.subject, "status": e.status, "severity": e.severity, "summary": e.summary,
        "first_seen": e.first_seen, "last_seen": e.last_seen,
        "evidence": json.dumps(e.evidence, default=str, sort_keys=True)})]


def _incident(e: Incident) -> list[TableRow]:
    culprit = e.culprits[0] if e.culprits else None
    return [("incident_events", {
        "event_id": e.event_id, "ts": e.ts, "job_id": e.job_id, "host": e.host, "incident_id": e.incident_id,
        "category": e.category, "cause": e.cause, "status": e.status, "severity": e.severity,
        "confidence": e.confidence, "summary": e.summary, "culprit_host": culprit.host if culprit else "",
        "culprit_rank": culprit.rank if culprit else None,
        "culprits": json.dumps([c.model_dump(mode="json") for c in e.culprits]),
        "victims": json.dumps([v.model_dump(mode="json") for v in e.victims]),
        "victim_ranks": sorted({v.rank for v in e.victims if v.rank is not None}), "alerts": list(e.alerts),
        "first_sign": e.first_sign, "detected": e.detected,
        "evidence": json.dumps(e.evidence, default=str, sort_keys=True)})]


def _checkpoint(e: Checkpoint) -> list[TableRow]:
    return [("checkpoints", {
        "event_id": e.event_id, "ts": e.ts, "job_id": e.job_id, "host": e.host, "rank": e.rank, "step": e.step,
        "phase": e.phase, "path": e.path, "blocked_ms": e.blocked_ms, "duration_ms": e.duration_ms,
        "bytes": e.bytes, "error": e.error, "dropped": e.dropped})]


def _recovery(e: RecoveryAction) -> list[TableRow]:
    rows: list[TableRow] = [("recovery_actions", {
        "event_id": e.event_id, "ts": e.ts, "job_id": e.job_id, "host": e.host, "action": e.action,
        "target": e.target, "status": e.status, "reason": e.reason, "alert_fingerprint": e.alert_fingerprint,
        "details": json.dumps(e.details, default=str, sort_keys=True), "incident_id": e.incident_id,
        "actor": e.actor, "command_id": e.command_id, "generation": e.generation, "started_at": e.started_at,
        "duration_ms": e.duration_ms, "dry_run": int(e.dry_run)})]
    if e.action in ("start", "restart") and e.status == "started":  # a new run of the job begins
        hosts = e.details.get("hosts", [])
        rows.append(("job_registrations", {"job_id": e.job_id, "ts": e.ts, "event_id": e.event_id,
                                           "hosts": sorted(str(h) for h in hosts) if isinstance(hosts, list) else []}))
    return rows


def _outcome(e: Outcome) -> list[TableRow]:
    return [("recovery_outcomes", {
        "event_id": e.event_id, "ts": e.ts, "job_id": e.job_id, "incident_id": e.incident_id, "result": e.result,
        "category": e.category, "cause": e.cause, "first_sign": e.first_sign, "detected": e.detected,
        "resumed_at": e.resumed_at, "detect_s": e.detect_s, "decide_s": e.decide_s, "pause_s": e.pause_s,
        "diagnose_s": e.diagnose_s, "restart_s": e.restart_s, "checkpoint_load_s": e.checkpoint_load_s,
        "total_s": e.total_s, "checkpoint_step": e.checkpoint_step, "last_step": e.last_step,
        "steps_lost": e.steps_lost, "first_step": e.first_step, "generation": e.generation,
        "cordoned": list(e.cordoned), "hosts": list(e.hosts), "reason": e.reason})]


def _advice(e: Advice) -> list[TableRow]:
    return [("advice_events", {
        "event_id": e.event_id, "job_id": e.job_id, "ts": e.ts, "advice_id": e.advice_id, "nodes": e.nodes,
        "current": e.current, "predicted": e.predicted, "still_scaling": int(e.still_scaling),
        "curve": json.dumps([p.model_dump(mode="json") for p in e.curve]), "hot": list(e.hot),
        "starved": list(e.starved), "data_share": e.data_share, "reasons": list(e.reasons),
        "scored": e.scored.model_dump_json() if e.scored else "",
        "score_error_pct": e.scored.error_pct if e.scored else None})]


def _member(e: Member) -> list[TableRow]:
    r = e.replication
    return [("recovery_members", {
        "event_id": e.event_id, "ts": e.ts, "job_id": e.job_id, "host": e.host, "state": e.state, "since": e.since,
        "generation": e.generation, "node_rank": e.node_rank, "spare": int(e.spare), "started_at": e.started_at,
        "first_step": e.first_step, "first_step_at": e.first_step_at, "last_step": e.last_step,
        "last_step_at": e.last_step_at, "steps": e.steps, "step_ms": e.step_ms, "reason": e.reason,
        "fault": e.fault or "", "repl_buddy": (r.buddy or "") if r else "", "repl_pushed": r.pushed if r else 0,
        "repl_staged": r.staged if r else 0, "repl_pushed_bytes": r.pushed_bytes if r else 0,
        "repl_staged_bytes": r.staged_bytes if r else 0,
        "repl_refused": {str(k): v for k, v in r.refused.items()} if r else {},
        "repl_last_step": r.last_step if r else None})]


KINDS: dict[str, Callable[[Any], list[TableRow]]] = {
    "step": _step, "heartbeat": _heartbeat, "nic": _nic, "log": _log, "exit": _exit, "collective": _collective,
    "job": _job, "alert": _alert, "checkpoint": _checkpoint, "recovery": _recovery,
    "incident": _incident, "outcome": _outcome, "member": _member,
    "advice": _advice,
}
"""kind -> the rows an event of it becomes: the kinds the analyzer stores."""

NOT_STORED: dict[str, str] = {
    "command": "the controller's signed orders to agents: what came of them is stored (recovery actions, acks)",
    "diagnostic": "node diagnostics results: the controller's input; the round's verdict is stored as a recovery action",
    "silence": "the notifier's: it keeps them in its own table (notify_silences)",
    "service": "a service's announcement of its metrics URL, for `vigil status`: read from its topic, never stored",
}
"""kind -> why the analyzer stores none of its events (every contract kind is in KINDS or here: test_one_home)."""

LOOKUP: dict[str, str] = {
    "step_timings": "step", "heartbeats": "ts", "gpu_stats": "ts", "nic_counters": "ts", "log_lines": "ts",
    "process_exits": "ts", "collective_traces": "ts", "alert_events": "ts", "checkpoints": "ts",
    "recovery_actions": "ts", "incident_events": "ts",
}
"""table -> the column bounding a look-up of its stored event_ids (`jobs`, `job_ranks`, `job_phase_kinds` and
`job_registrations` are keyed by job (and rank, phase or event), have no rollups, and rely on their ReplacingMergeTree)."""

RECENT = frozenset(HOT_KINDS)
"""Kinds a 10,000-GPU job sends thousands of per second: their re-sends are caught by an in-memory window."""


DECISIONS = frozenset({"alert_events", "incident_events", "recovery_actions", "recovery_outcomes", "advice_events",
                       "recovery_members"})
"""Tables of decisions and of the agents' attested facts (acks, member reports): each row says whether the ingest's
gate verified its signature (`verified`, migration 1000) and keeps the signature; readers read verified rows only."""
GATED = frozenset({"alert", "incident", "recovery", "outcome", "advice", "member"})
"""The kinds whose rows go to `DECISIONS`: the ingest runs the gate on these."""
VERIFIED = GATED | {"log"}
"""The kinds the ingest verifies: `GATED`, and log lines (a hardware fact unattested by its host is a claim)."""


def process(event: Ingestable, verified: bool = True) -> list[TableRow]:
    """The rows `event` becomes; [] for the kinds the analyzer does not store (`NOT_STORED`). A decision that is not `verified` (its
    signature refused by the gate) is stored flagged so, and never registers a run (`job_registrations`)."""
    if isinstance(event, LogLine):
        return _log(event, verified)
    fn = KINDS.get(event.kind)
    rows = fn(event) if fn is not None else []
    if event.kind not in GATED:
        return rows
    sig = str(getattr(event, "signature", "") or "")
    return [(t, {**r, "verified": int(verified), "signature": sig} if t in DECISIONS else r) for t, r in rows
            if verified or t in DECISIONS]
