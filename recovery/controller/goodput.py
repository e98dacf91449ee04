"""What faults cost: per incident where the time went, per job the effective training time ratio.

`outcome()` builds the `outcome` event that closes a case: time to detect (first sign ->
incident), to decide, to pause, to diagnose, to restart (start commands -> first step after
the restart, the checkpoint load included, also given alone from the ranks' `restored`
checkpoint events), the total (first sign -> first step), and the steps lost: the last step the
ranks completed before the fault (their agents' reports, which count completed steps only, and
at least the step restored: a checkpoint of step s proves s completed) - the step resumed from. `job_costs()` is what each recovery cost a job; the
job's effective training time ratio itself is vigil.contract.goodput's, read from the ranks'
step records (the controller's fold holds no per-step times). Pure functions of the folded state.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from vigil.contract import Outcome
from vigil.recovery.controller.state import Case, ClusterState, Job


def _ts(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def _secs(a: datetime | None, b: datetime | None) -> float | None:
    return None if a is None or b is None else round(max(0.0, (b - a).total_seconds()), 3)


def outcome(state: ClusterState, case: Case, result: str, now: datetime, reason: str = "") -> Outcome:
    job = state.job(case.job_id)
    d = case.details
    first_sign, detected = _ts(d.get("first_sign")), _ts(d.get("detected"))
    pause = case.step("pause", job.job_id)
    diag = case.step("diagnose", job.job_id)
    rst = case.step("restart", job.job_id) or case.step("start", job.job_id)
    cordon = case.step("cordon", job.job_id)
    resumed_at = first_step = gen = None
    hosts: list[str] = []
    if rst is not None and rst.status == "succeeded":
        resumed_at = _ts(rst.details.get("first_step_at"))
        first_step = rst.details.get("first_step")
        hosts = [str(h) for h in rst.details.get("hosts", [])]
    if rst is not None and rst.started_at is not None:
        gen = int(rst.started_details.get("generation", 0)) or None
    load, ckpt_step, source = restore_of(job, rst.started_at if rst else None, resumed_at)
    if ckpt_step is None and isinstance(first_step, int) and first_step > 0:
        ckpt_step = first_step - 1
    last_steps = [int(v) for d in ((pause.started_details, pause.details) if pause else ())
                  for v in d.get("last_steps", {}).values()]
    last = max(last_steps) if last_steps else None
    if last is not None and ckpt_step is not None:  # a checkpoint of step s proves s completed (reports may lag)
        last = max(last, ckpt_step)
    return Outcome(
        job_id=case.job_id, host="controller", ts=now, incident_id=case.case_id, result=result,  # type: ignore[arg-type]
        category=str(d.get("category", "")), cause=str(d.get("cause", "")), first_sign=first_sign, detected=detected,
        resumed_at=resumed_at, detect_s=_secs(first_sign, detected), decide_s=_secs(detected, case.opened_at),
        pause_s=pause.seconds() if pause else None, diagnose_s=diag.seconds() if diag else None,
        restart_s=_secs(rst.started_at, resumed_at) if rst else None, checkpoint_load_s=load,
        total_s=_secs(first_sign, resumed_at), checkpoint_step=ckpt_step, restore_source=source, last_step=last,
        steps_lost=max(0, last - ckpt_step) if last is not None and ckpt_step is not None else None,
        first_step=first_step if isinstance(first_step, int) else None, generation=gen,
        cordoned=[str(h) for h in (cordon.details.get("cordoned", []) if cordon else [])], hosts=hosts,
        reason=reason[:2048])


def restore_of(
    job: Job, since: datetime | None, until: datetime | None
) -> tuple[float | None, int | None, Literal["", "memory", "peer", "persisted"]]:
    """(seconds of the slowest rank's load, the step restored, where from) of a restart, from `restored` events.

    The source is the weakest any rank used: ``persisted`` over ``peer`` over ``memory``."""
    if since is None:
        return None, None, ""
    hits = [c for c in job.restored if c.ts >= since and (until is None or c.ts <= until)]
    if not hits:
        return None, None, ""
    step = max(c.step for c in hits)
    sources = {c.source for c in hits if c.step == step}
    source: Literal["", "memory", "peer", "persisted"] = next(
        (s for s in ("persisted", "peer", "memory") if s in sources), ""
    )
    return round(max(c.duration_ms for c in hits) / 1000, 3), step, source


def job_costs(state: ClusterState, job: Job, step_ms: float | None) -> list[dict[str, Any]]:
    """Per recovery of `job` (oldest first) what it cost: its downtime plus its steps lost at `step_ms`
    (the ideal step time of vigil.contract.goodput, None where not known)."""
    costs = []
    for cid in job.cases:
        o = state.cases[cid].outcome
        if o is None or state.cases[cid].cls in ("start", ""):
            continue
        lost = (o.steps_lost or 0) * step_ms / 1000 if step_ms is not None else 0.0
        costs.append({"incident_id": cid, "result": o.result, "total_s": o.total_s, "steps_lost": o.steps_lost,
                      "lost_s": round((o.total_s or 0) + lost, 3)})
    return costs
