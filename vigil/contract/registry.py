"""One table of what travels where: event kind <-> schema version <-> model <-> topic.

Topics are logical names (`steps`, `alerts`, ...); `VigilSettings.topic()` adds the
configured prefix. Each (kind, version) carries an example payload that the test
suite validates, so the registry doubles as the contract's documentation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vigil.contract.advice import Advice
from vigil.contract.base import Event
from vigil.contract.control import Command, Diagnostic, Member, Outcome
from vigil.contract.decisions import Alert, Checkpoint, Incident, JobRegistered, RecoveryAction, Silence
from vigil.contract.services import SERVICE_JOB, SERVICES_TOPIC, ServiceAnnouncement
from vigil.contract.telemetry import (
    CollectiveTrace,
    Heartbeat,
    LogLine,
    NicCounters,
    ProcessExit,
    StepTiming,
)

DEAD_LETTER_TOPIC = "deadletter"

_TS = "2026-11-01T12:00:00Z"
_ORIGIN = {"job_id": "llama-70b", "host": "node-0007", "ts": _TS, "event_id": "0f3c2a9e5d7b4c1a"}
_INCIDENT = "llama-70b/host_fault/node-0007/20261101T115958"


@dataclass(frozen=True, kw_only=True)
class EventSpec:
    kind: str
    version: int
    model: type[Event]
    topic: str
    example: dict[str, Any]


SPECS: tuple[EventSpec, ...] = (
    EventSpec(kind="job", version=1, model=JobRegistered, topic="jobs", example={
        **_ORIGIN, "name": "llama-70b pretrain", "world_size": 4, "tp": 2, "pp": 1, "dp": 2,
        "gpus_per_host": 2, "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_peak_tflops": 989.0,
        "model_flops_per_step": 3.2e15,
        "ranks": [{"rank": r, "host": f"node-000{r // 2}", "local_rank": r % 2,
                   "coords": {"tp": r % 2, "dp": r // 2, "pp": 0}} for r in range(4)],
        "phase_kinds": {"pp_handoff": "wait"},
        "data": {"epoch": 0, "ranks": 4, "samples_left": 61_440, "samples_done": 38_560, "in_flight": 3,
                 "exact": True}}),
    EventSpec(kind="step", version=1, model=StepTiming, topic="steps", example={
        **_ORIGIN, "rank": 3, "local_rank": 1, "world_size": 4,
        "coords": {"dp": 1, "tp": 1, "pp": 0}, "step": 1200, "step_ms": 812.5,
        "phases": {"forward": 301.2, "backward": 402.9, "dp_exchange": 61.7, "optimizer": 88.1},
        "phase_kinds": {"dp_exchange": "comm"}, "tokens": 524288, "tflops": 402.1, "mfu": 0.41}),
    EventSpec(kind="heartbeat", version=1, model=Heartbeat, topic="heartbeats", example={
        **_ORIGIN, "ip": "10.0.3.7", "pod": "llama-70b-worker-7", "node": "node-0007",
        "agent_version": "0.1.0", "uptime_s": 3600.5, "interval_s": 2.0,
        "processes": [{"pid": 4242, "status": "running", "local_rank": 0, "cpu_pct": 98.0}],
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "util_pct": 97.0, "temp_c": 61.0,
                  "sm_clock_mhz": 1980.0, "throttle_reasons": [], "ecc_uncorrected": 0}]}),
    EventSpec(kind="nic", version=1, model=NicCounters, topic="nic", example={
        **_ORIGIN, "device": "mlx5_0", "port": 1, "link": "rdma", "tx_bytes": 9_800_000_000,
        "rx_bytes": 9_700_000_000, "tx_bps": 2.4e10, "rx_bps": 2.3e10, "interval_s": 1.0}),
    EventSpec(kind="log", version=1, model=LogLine, topic="logs", example={
        **_ORIGIN, "rank": 5, "local_rank": 5, "stream": "stderr", "category": "xid",
        "severity": "critical", "xid": 79,
        "message": "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."}),
    EventSpec(kind="exit", version=1, model=ProcessExit, topic="logs", example={
        **_ORIGIN, "rank": 5, "local_rank": 5, "pid": 4242, "exit_code": 1,
        "summary": "RuntimeError: CUDA error: uncorrectable NVLink error detected",
        "traceback": "Traceback (most recent call last):\n  ...\nRuntimeError: CUDA error",
        "failed_at": "2026-11-01T11:59:58Z", "launcher": False}),
    EventSpec(kind="collective", version=1, model=CollectiveTrace, topic="collectives", example={
        **_ORIGIN, "rank": 3, "local_rank": 1, "process_groups": {"0": "default_pg"},
        "entries": [{"record_id": 17, "pg_id": 0, "collective_seq_id": 17,
                     "profiling_name": "nccl:all_reduce", "state": "started",
                     "time_created_ns": 1_700_000_000_000_000_000, "timeout_ms": 600000}],
        "last_started_seq": {"0": 17}, "last_completed_seq": {"0": 16},
        "group_ranks": {"0": [0, 1, 2, 3]}, "trigger": "watchdog", "step": 1199,
        "stack": 'File "train.py", line 88, in main\n    loss.backward()'}),
    EventSpec(kind="alert", version=1, model=Alert, topic="alerts", example={
        **_ORIGIN, "fingerprint": "llama-70b/straggler/node-0007/forward", "alert": "straggler",
        "subject": "node-0007/forward", "status": "firing", "severity": "warning",
        "summary": "node-0007 forward is 9.8% slower than the fleet median",
        "first_seen": _TS, "last_seen": _TS, "evidence": {"slowdown_pct": 9.8, "windows": "4/5"}}),
    EventSpec(kind="incident", version=1, model=Incident, topic="incidents", example={
        **_ORIGIN, "incident_id": "llama-70b/crash_cascade/node-0007/r5/20261101T115958", "category": "crash_cascade",
        "cause": "hardware", "status": "open", "severity": "critical",
        "summary": "node-0007 rank 5 failed first (CUDA error: uncorrectable NVLink error); 7 ranks failed after it",
        "culprits": [{"host": "node-0007", "rank": 5, "local_rank": 5, "coords": {"dp": 1, "tp": 1, "pp": 0},
                      "message": "RuntimeError: CUDA error: uncorrectable NVLink error detected"}],
        "victims": [{"host": "node-0003", "rank": 1, "message": "RuntimeError: Connection closed by peer"}],
        "alerts": ["llama-70b/process_exit/node-0007/rank5", "llama-70b/process_exit/node-0003/rank1"],
        "first_sign": "2026-11-01T11:59:58Z", "detected": _TS,
        "evidence": {"first_exit": "2026-11-01T11:59:58Z", "nvlink_lines": 3}}),
    EventSpec(kind="silence", version=1, model=Silence, topic="silences", example={
        **_ORIGIN, "job_id": "llama-70b", "host": "*", "silence_id": "5f1c9d2e", "ts": _TS,
        "matchers": {"job": "llama-70b", "kind": "straggler"}, "starts_at": _TS, "ends_at": "2026-11-01T14:00:00Z",
        "created_by": "alice", "reason": "node-0007 is being drained for maintenance"}),
    EventSpec(kind="recovery", version=1, model=RecoveryAction, topic="recovery", example={
        **_ORIGIN, "action": "cordon", "target": "node-0007", "status": "succeeded",
        "reason": "hardware incident: Xid 79 on node-0007", "alert_fingerprint": "",
        "incident_id": _INCIDENT, "actor": "controller", "started_at": "2026-11-01T11:59:59Z", "duration_ms": 12.5,
        "details": {"backend": "kubernetes", "breaker": {"cordons_last_hour": 1, "limit": 3}}}),
    EventSpec(kind="command", version=1, model=Command, topic="commands", example={
        **_ORIGIN, "command_id": "llama-70b/g8/start/node-0007", "action": "start", "incident_id": _INCIDENT,
        "reason": "restart without node-0003", "generation": 8,
        "world": {"generation": 8, "hosts": ["node-0001", "node-0007"], "node_rank": 1, "master_addr": "10.0.3.1",
                  "master_port": 29500}}),
    EventSpec(kind="member", version=1, model=Member, topic="recovery", example={
        **_ORIGIN, "state": "training", "since": "2026-11-01T11:59:55Z", "generation": 8, "node_rank": 1, "nodes_min": 2, "nodes_max": 4,
        "node_multiple": 2, "ip": "10.0.3.7", "ports": [29500, 29501, 29502], "started_at": "2026-11-01T11:59:40Z",
        "first_step": 1201, "first_step_at": "2026-11-01T11:59:55Z", "last_step": 1210,
        "last_step_at": _TS, "steps": 10, "step_ms": 812.5, "command_id": "llama-70b/g8/start/node-0007",
        "replication": {"buddy": "node-0001", "pushed": 20, "staged": 2, "pushed_bytes": 20 << 30,
                        "staged_bytes": 2 << 30, "refused": {"host_full": 1}, "last_step": 1210}}),
    EventSpec(kind="diagnostic", version=1, model=Diagnostic, topic="recovery", example={
        **_ORIGIN, "incident_id": _INCIDENT, "command_id": "llama-70b/diag/r2/node-0007", "round": 2,
        "test": "verdict", "group": ["node-0007", "node-0001"], "ok": True, "verdict": "slow",
        "values": {"elapsed_s_r1": 4.1, "elapsed_s_r2": 4.3, "median_s": 1.2, "gemm_gflops": 12.0}}),
    EventSpec(kind="outcome", version=1, model=Outcome, topic="recovery", example={
        **_ORIGIN, "incident_id": _INCIDENT, "result": "resumed", "category": "host_fault", "cause": "hardware",
        "first_sign": "2026-11-01T11:59:58Z", "detected": _TS, "resumed_at": "2026-11-01T12:00:41Z",
        "detect_s": 2.0, "decide_s": 0.1, "pause_s": 1.5, "diagnose_s": 14.2, "restart_s": 22.3,
        "checkpoint_load_s": 1.1, "total_s": 43.0, "checkpoint_step": 1200, "last_step": 1213, "steps_lost": 13,
        "first_step": 1201, "generation": 8, "cordoned": ["node-0003"], "hosts": ["node-0001", "node-0007"]}),
    EventSpec(kind="advice", version=1, model=Advice, topic="recovery", example={
        **_ORIGIN, "host": "advisor", "advice_id": "llama-70b/advice/20261101T120000", "nodes": 4, "current": 6,
        "predicted": 182_000.0, "still_scaling": False,
        "curve": [{"nodes": n, "throughput": t, "steps": 40} for n, t in ((2, 98_000.0), (4, 182_000.0),
                                                                           (6, 190_000.0))],
        "hot": ["node-0007"], "starved": [], "data_share": 0.08,
        "reasons": ["recommend 4 nodes: going to 6 adds 8% of a node's linear throughput per node"],
        "scored": {"advice_id": "llama-70b/advice/20261101T100000", "advised_at": "2026-11-01T10:00:00Z",
                   "nodes": 6, "predicted": 200_000.0, "measured": 190_000.0, "error_pct": -5.0}}),
    EventSpec(kind="checkpoint", version=1, model=Checkpoint, topic="recovery", example={
        **_ORIGIN, "step": 1200, "phase": "committed", "path": "/ckpt/llama-70b/step-0000001200-3fa9c2d1",
        "blocked_ms": 0.0, "duration_ms": 4200.0, "bytes": 524_288_000, "rank": 0, "error": "", "dropped": 0}),
    EventSpec(kind="service", version=1, model=ServiceAnnouncement, topic=SERVICES_TOPIC, example={
        **_ORIGIN, "job_id": SERVICE_JOB, "host": "vigil-0", "service": "controller", "instance": "vigil-0:4242",
        "state": "up", "metrics_url": "http://vigil-0:9102/metrics", "interval_s": 300.0,
        "started_at": "2026-11-01T11:00:00Z"}),
)

BY_KIND: dict[tuple[str, int], EventSpec] = {(s.kind, s.version): s for s in SPECS}
LATEST: dict[str, EventSpec] = {s.kind: s for s in sorted(SPECS, key=lambda s: s.version)}
TOPICS: tuple[str, ...] = (*tuple(dict.fromkeys(s.topic for s in SPECS)), DEAD_LETTER_TOPIC)
TELEMETRY_TOPICS: tuple[str, ...] = ("jobs", "steps", "heartbeats", "nic", "logs", "collectives")


def spec_for(kind: str, version: int | None = None) -> EventSpec:
    """The spec of `kind` at `version` (latest when None); ValueError when unknown."""
    spec = LATEST.get(kind) if version is None else BY_KIND.get((kind, version))
    if spec is None:
        known = ", ".join(sorted(LATEST))
        raise ValueError(f"unknown event kind/version {kind!r}/{version}; known kinds: {known}")
    return spec


def topic_of(event: Event) -> str:
    return spec_for(str(event.kind), int(event.schema_version)).topic
