"""The recovery controller as a hostable service: how `vigil up` builds it (`--no-recovery` leaves it out).

Against a production cluster the controller runs in its own process (`vigil recovery run`,
one or more instances: one leads, see `controller.lease`); `vigil status` then reads what the
log says of it: the open recoveries and when the controller last acted.
"""

from __future__ import annotations

from typing import Any

from vigil.errors import one_line
from vigil.service import Service, ServiceSpec, StackContext
from vigil.settings import VigilSettings


def build(ctx: StackContext) -> Service:
    from vigil.recovery.controller.service import RecoveryService

    return RecoveryService(ctx.settings, ctx.bootstrap)


def progress(settings: VigilSettings, bootstrap: str) -> dict[str, Any]:
    """What the recovery log says: jobs under control, open recoveries, the controller's last action."""
    from vigil.recovery.controller.report import read_state

    try:
        state = read_state(settings, bootstrap, timeout=10.0)
    except Exception as exc:
        return {"ok": False, "error": f"recovery log: {one_line(exc, 200)}"}
    last = max((s.ended_at for c in state.cases.values() for s in c.steps.values() if s.ended_at), default=None)
    return {"ok": True, "jobs": sum(1 for j in state.jobs.values() if j.members),
            "open_recoveries": sum(1 for c in state.cases.values() if c.open),
            "last_action": last.isoformat() if last else None}


SPEC = ServiceSpec(name="recovery", help="recovery controller: diagnose, cordon, restart from checkpoints",
                   factory=build, probe=progress)
