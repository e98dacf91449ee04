"""`vigil recovery status | history`: the folded log as documents and as text.

`read_state` folds the controller's input topics once, from the beginning to the end (no
consumer group), exactly as the controller does; `status` is the present (per job: its
generation, hosts, members with their snapshot replication, open recoveries and what they wait for;
the cordoned hosts), `history` the past (per recovery: every step with its timing, the outcome's
time split and steps lost; per job the effective training time ratio and the recoveries that cost it).
Both are plain dicts (`--json`), `format_status`/`format_history` their text.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from vigil.contract.wire import decode_batch
from vigil.recovery.backends.base import CordonInfo
from vigil.recovery.controller.engine import halted_by
from vigil.recovery.controller.goodput import job_costs
from vigil.recovery.controller.state import INPUT_TOPICS, Case, ClusterState
from vigil.recovery.controller.steps import short_id
from vigil.settings import VigilSettings


def read_state(settings: VigilSettings, bootstrap: str, timeout: float = 15.0) -> ClusterState:
    return read_state_checked(settings, bootstrap, timeout)[0]


def read_state_checked(settings: VigilSettings, bootstrap: str, timeout: float = 15.0) -> tuple[ClusterState, int]:
    """The recovery log folded as the controller folds it, and how many events its gate refused (left out)."""
    from vigil.kafka.reader import read_topics
    from vigil.signing.readers import admits

    ok = admits(settings.home)  # what the controller's gate refuses is not shown as what happened
    state, refused = ClusterState(), 0
    for rec in read_topics(settings, bootstrap, [settings.topic(t) for t in INPUT_TOPICS], timeout=timeout):
        events = decode_batch(rec.value).events
        admitted = [e for e in events if ok(e)]
        refused += len(events) - len(admitted)
        state.apply(admitted)
    return state, refused


def find_case(state: ClusterState, ident: str) -> Case | None:
    """A case by its id, its short id, or a unique prefix of either."""
    if ident in state.cases:
        return state.cases[ident]
    hits = [c for c in state.cases.values() if c.opened_at is not None
            and (short_id(c.case_id).startswith(ident) or c.case_id.startswith(ident))]
    return hits[0] if len(hits) == 1 else None


def _current_step(case: Case) -> str:
    for name in case.plan:
        step = case.step(name, case.job_id)
        if step is None or not step.ended:
            return name if step is None or step.reason == "" else f"{name} ({step.reason})"
    return "finishing"


def _case_line(case: Case) -> dict[str, Any]:
    return {"id": case.case_id, "short_id": short_id(case.case_id), "class": case.cls, "plan": case.plan,
            "opened_at": case.opened_at, "summary": case.details.get("summary", ""),
            "waiting_for": _current_step(case), "awaiting_approval": _current_step(case).startswith("approve")}


def status(state: ClusterState, now: datetime, cordoned: dict[str, CordonInfo], job: str | None = None) -> dict[str, Any]:
    jobs: dict[str, Any] = {}
    for j in sorted(state.jobs.values(), key=lambda j: j.job_id):
        if not j.members or (job is not None and j.job_id != job):
            continue
        halted = halted_by(state, j)
        jobs[j.job_id] = {
            "generation": j.generation, "hosts": j.world, "started_at": j.world_started_at,
            "latest_checkpoint": j.committed.step if j.committed else None,
            "halted_by": halted.case_id if halted else None,
            "members": {h: {"state": m.state, "generation": m.generation, "node_rank": m.node_rank,
                            "last_step": m.last_step, "seen_s": round((now - m.ts).total_seconds(), 1),
                            "spare": m.spare, "replication": m.replication.model_dump() if m.replication else None}
                        for h, m in sorted(j.members.items())},
            "open": [_case_line(state.cases[c]) for c in j.cases if state.cases[c].open],
        }
    return {"jobs": jobs, "cordoned": {h: {"reason": c.reason, "incident_id": c.incident_id, "by": c.by, "at": c.at}
                                       for h, c in sorted(cordoned.items())}}


def history(state: ClusterState, now: datetime, job: str | None = None,
            ettr: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Every recovery with its steps; per job its effective training time ratio from `ettr` (by job:
    effective_ratio, iterations, step_ms, wall_s, as vigil.contract.goodput defines them; read from the
    step records by the caller, absent where unknown) and what each recovery cost."""
    out: dict[str, Any] = {"recoveries": [], "jobs": {}}
    for j in sorted(state.jobs.values(), key=lambda j: j.job_id):
        if job is not None and j.job_id != job:
            continue
        for cid in j.cases:
            case = state.cases[cid]
            steps = sorted(case.steps.values(), key=lambda s: (s.started_at or s.planned_at or s.ended_at or now))
            out["recoveries"].append({
                **_case_line(case),
                "outcome": case.outcome.model_dump(mode="json", exclude={"kind", "schema_version", "event_id", "host"})
                if case.outcome else None,
                "steps": [{"action": s.action, "target": s.target, "status": s.status, "started_at": s.started_at,
                           "ended_at": s.ended_at, "seconds": s.seconds(), "reason": s.reason} for s in steps],
            })
        figures = (ettr or {}).get(j.job_id)
        costs = job_costs(state, j, figures["step_ms"] if figures else None)
        if figures or costs:
            out["jobs"][j.job_id] = {**(figures or {"effective_ratio": None}), "costs": costs}
    return out


def _t(value: Any) -> str:
    return value.strftime("%H:%M:%S") if isinstance(value, datetime) else "-"


def _s(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f}s"


def _v(value: Any) -> str:
    return "-" if value is None else str(value)


def _replication(r: dict[str, Any]) -> str:
    refused = ", ".join(f"{k} {v}" for k, v in sorted(r["refused"].items())) or "none"
    upto = f" up to step {r['last_step']}" if r["last_step"] is not None else ""
    return (f"to {r['buddy'] or 'nobody'}{upto} (pushed {r['pushed']}, {r['pushed_bytes'] / 2**20:.1f} MiB; "
            f"staged {r['staged']}, {r['staged_bytes'] / 2**20:.1f} MiB; refused {refused})")


def format_status(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    for job_id, j in doc["jobs"].items():
        state = f"HALTED by {j['halted_by']}" if j["halted_by"] else f"generation {j['generation']}"
        lines.append(f"{job_id}: {state} on {', '.join(j['hosts']) or '-'} "
                     f"(latest checkpoint {j['latest_checkpoint'] if j['latest_checkpoint'] is not None else '-'})")
        for host, m in j["members"].items():
            lines.append(f"  {host:<20} {m['state']:<10} gen {m['generation']:<3} rank {m['node_rank'] if m['node_rank'] is not None else '-':<3} "
                         f"step {m['last_step'] if m['last_step'] is not None else '-':<8} seen {m['seen_s']}s ago"
                         f"{'  (spare)' if m['spare'] else ''}")
            if m.get("replication"):
                lines.append(f"  {'':<20} snapshots: {_replication(m['replication'])}")
        for c in j["open"]:
            lines.append(f"  recovery {c['short_id']} ({c['class']}): {' -> '.join(c['plan'])}; now: {c['waiting_for']}"
                         f"{'  APPROVE: vigil recovery approve ' + c['short_id'] if c['awaiting_approval'] else ''}")
    if not doc["jobs"]:
        lines.append("no job under recovery control")
    lines.append("cordoned: " + (", ".join(f"{h} ({c['reason'][:60]})" for h, c in doc["cordoned"].items()) or "none"))
    return "\n".join(lines)


def format_history(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    for r in doc["recoveries"]:
        o = r["outcome"] or {}
        lines.append(f"{r['short_id']} {r['id']} [{r['class']}] {o.get('result', 'open')}: {r['summary'][:120]}")
        if o:
            lines.append(f"    detect {_s(o.get('detect_s'))}  decide {_s(o.get('decide_s'))}  pause {_s(o.get('pause_s'))}"
                         f"  diagnose {_s(o.get('diagnose_s'))}  restart {_s(o.get('restart_s'))}"
                         f" (checkpoint load {_s(o.get('checkpoint_load_s'))})  total {_s(o.get('total_s'))}"
                         f"  resumed at step {_v(o.get('first_step'))} from checkpoint {_v(o.get('checkpoint_step'))}"
                         f"{' (' + o['restore_source'] + ')' if o.get('restore_source') else ''}"
                         f"  steps lost {_v(o.get('steps_lost'))}"
                         f"{'  cordoned ' + ', '.join(o['cordoned']) if o.get('cordoned') else ''}")
        for s in r["steps"]:
            lines.append(f"    {_t(s['started_at'] or s['ended_at'])} {s['action']:<9} {s['target']:<24} {s['status']:<9} "
                         f"{_s(s['seconds']):>7}  {(s['reason'] or '')[:100]}")
    for job_id, g in doc["jobs"].items():
        lines.append(f"{job_id}: effective training time not known (no step records read)"
                     if g["effective_ratio"] is None else
                     f"{job_id}: effective training time {g['effective_ratio']:.1%} ({g['iterations']} steps x "
                     f"{g['step_ms']:.0f} ms ideal / {g['wall_s']:.0f} s wall)")
        for c in g["costs"]:
            lines.append(f"    {short_id(c['incident_id'])} {c['result']}: down {_s(c['total_s'])}, "
                         f"{c['steps_lost'] if c['steps_lost'] is not None else '-'} steps lost")
    if not doc["recoveries"]:
        lines.append("no recoveries")
    return "\n".join(lines)
