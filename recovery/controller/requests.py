"""Operator requests: cordon, uncordon or evict a host on behalf of someone who holds no node backend.

The dashboard may not write to the cluster (only the controller holds the node backend and, on
Kubernetes, the RBAC for it), so its buttons publish a request (`vigil.contract.operator_request`:
a `planned` step with `command_id` ``request/<id>``) and the leading controller executes it here.
The result is a `recovery` event with the same `command_id`, action, target and actor (who asked),
`succeeded` (or `skipped` when the backend had nothing to change, `failed` with the backend's
error), so the state knows it was done and a restarted controller never executes it twice. In
dry-run mode nothing is touched: the request is `skipped` with the reason. A request the
controller's checks refuse (`admission`) is `skipped` too, `details.refused` naming the reason.
"""

from __future__ import annotations

from datetime import datetime

from vigil.contract import RecoveryAction
from vigil.errors import one_line
from vigil.recovery.backends.base import Change, NodeBackend
from vigil.recovery.controller.admission import RequestRefusal
from vigil.recovery.errors import BackendError


def execute(backend: NodeBackend, req: RecoveryAction, now: datetime, *, dry_run: bool = False,
            epoch: int = 0) -> RecoveryAction:
    """Carry out one request against the backend; the event that records how it went (of lease `epoch`)."""
    host = req.target
    details: dict[str, object] = {"backend": backend.name, "executed_by": "controller"}
    if dry_run:
        status, reason = "skipped", "mode dry-run: the controller changes nothing (`vigil cordon` acts directly)"
    else:
        try:
            change = _call(backend, req)
        except BackendError as exc:
            status, reason = "failed", one_line(exc)
        else:
            status = "succeeded" if change.changed else "skipped"
            reason = req.reason if change.changed else change.detail
            details.update(changed=change.changed, detail=change.detail)
    return RecoveryAction(job_id=req.job_id, host=host, ts=now, action=req.action, target=host,
                          status=status, reason=reason[:4096], command_id=req.command_id,  # type: ignore[arg-type]
                          actor=req.actor, started_at=req.ts,
                          duration_ms=max(0.0, round((now - req.ts).total_seconds() * 1000, 1)), details=details,
                          epoch=epoch)


_WHY = {RequestRefusal.EXPIRED: "refused: signed more than the controller's retention ago (a replay, or a request "
                                 "nobody executed in time): ask again",
        RequestRefusal.UNKNOWN_JOB: "refused: no agent of job {job} announced itself to the controller",
        RequestRefusal.FOREIGN_HOST: "refused: {host} is not a host of job {job}",
        RequestRefusal.RATE_LIMITED: "refused: {actor} asked more often than VIGIL_RECOVERY_REQUESTS_PER_MINUTE allows"}


def refuse(req: RecoveryAction, refusal: RequestRefusal, now: datetime, *, epoch: int = 0) -> RecoveryAction:
    """The result of a request the controller will not carry out: `skipped`, the reason typed in `details`."""
    reason = _WHY[refusal].format(job=req.job_id, host=req.target, actor=req.actor)
    return RecoveryAction(job_id=req.job_id, host=req.target, ts=now, action=req.action, target=req.target,
                          status="skipped", reason=reason[:4096], command_id=req.command_id, actor=req.actor,
                          started_at=req.ts, details={"refused": refusal.value, "executed_by": "controller"},
                          epoch=epoch)


def _call(backend: NodeBackend, req: RecoveryAction) -> Change:
    if req.action == "cordon":
        return backend.cordon(req.target, reason=req.reason, incident_id="", actor=req.actor)
    if req.action == "uncordon":
        return backend.uncordon(req.target, reason=req.reason, actor=req.actor)
    if req.action == "evict":
        return backend.evict(req.target, job_id=req.job_id, reason=req.reason, incident_id="")
    raise BackendError(f"operator request {req.command_id}: {req.action} is not a host action")
