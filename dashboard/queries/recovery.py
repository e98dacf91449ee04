"""Recovery of one job: its recoveries (incident -> plan -> steps with timings -> outcome), current
cordons, operator requests, and goodput, all from the analyzer's `recovery_*` tables.

Every figure comes from ClickHouse: the steps from `recovery_actions` (the latest state of each
(recovery, step, target)), how each recovery ended from `recovery_outcomes` (one row per
incident), the agents' progress from `recovery_members` (one row per agent), so a page costs the
job's own recovery rows, never a read of the `recovery` topic. Goodput's ratio is the one
definition (vigil.contract.goodput) read through the Overview's `job_health`, so the two pages
agree; per recovery what it cost: its downtime (first sign -> first step after the restart) plus
the steps lost since the checkpoint at the ideal step time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vigil.dashboard.queries import overview
from vigil.dashboard.store import Row, Store
from vigil.dashboard.tables import RECOVERY_ACTIONS, RECOVERY_MEMBERS, RECOVERY_OUTCOMES

_ENDED = "('succeeded', 'failed', 'skipped')"
_RANK = f"multiIf(status IN {_ENDED}, 2, status = 'started', 1, 0)"

_CASES_SQL = f"""
SELECT incident_id, min(ts) AS opened, argMax(status, ts) AS plan_state,
       argMinIf(details, ts, status = 'planned') AS plan, argMax(reason, ts) AS why
FROM {RECOVERY_ACTIONS}
WHERE verified = 1 AND job_id = {{job:String}} AND action = 'plan' AND incident_id != ''
GROUP BY incident_id ORDER BY opened DESC LIMIT {{limit:UInt32}}
"""

_STEPS_SQL = f"""
SELECT incident_id, action, target, argMax(status, ({_RANK}, ts)) AS state,
       minIf(ts, status = 'planned') AS planned_at, minIf(ts, status = 'started') AS began,
       maxIf(ts, status IN {_ENDED}) AS ended_at, maxIf(duration_ms, status IN {_ENDED}) AS duration_ms,
       argMaxIf(reason, ts, status IN {_ENDED}) AS end_reason, argMax(reason, ts) AS last_reason,
       max(dry_run) AS dry_run, min(ts) AS first_ts
FROM {RECOVERY_ACTIONS}
WHERE verified = 1 AND job_id = {{job:String}} AND incident_id IN {{cases:Array(String)}} AND action != 'plan'
  AND NOT startsWith(actor, 'agent:')
GROUP BY incident_id, action, target ORDER BY first_ts, action, target
"""

_OUTCOMES_SQL = f"""
SELECT incident_id, argMax(result, ts) AS result, argMax(detect_s, ts) AS detect_s, argMax(decide_s, ts) AS decide_s,
       argMax(pause_s, ts) AS pause_s, argMax(diagnose_s, ts) AS diagnose_s, argMax(restart_s, ts) AS restart_s,
       argMax(checkpoint_load_s, ts) AS checkpoint_load_s, argMax(total_s, ts) AS total_s,
       argMax(checkpoint_step, ts) AS checkpoint_step, argMax(last_step, ts) AS last_step,
       argMax(steps_lost, ts) AS steps_lost, argMax(first_step, ts) AS first_step,
       argMax(cordoned, ts) AS cordoned, argMax(hosts, ts) AS hosts, argMax(reason, ts) AS why
FROM {RECOVERY_OUTCOMES} WHERE verified = 1 AND job_id = {{job:String}}
GROUP BY incident_id
"""

# a host's latest effective cordon / uncordon (the controller's per-host step, `vigil cordon`, a request)
_CORDONS_SQL = f"""
SELECT target, argMax(action, ts) AS last, argMax(reason, ts) AS why, argMax(actor, ts) AS who,
       argMax(incident_id, ts) AS incident, argMax(job_id, ts) AS job, max(ts) AS at
FROM {RECOVERY_ACTIONS}
WHERE verified = 1 AND action IN ('cordon', 'uncordon') AND status = 'succeeded' AND target != job_id
GROUP BY target HAVING last = 'cordon' ORDER BY at DESC
"""

_REQUESTS_SQL = f"""
SELECT command_id, any(action) AS action, any(target) AS target, any(job_id) AS job, any(actor) AS who,
       argMax(status, ({_RANK}, ts)) AS state, argMax(reason, ts) AS why, min(ts) AS asked
FROM {RECOVERY_ACTIONS}
WHERE verified = 1 AND startsWith(command_id, 'request/') AND (job_id = {{job:String}} OR job_id = '*')
GROUP BY command_id ORDER BY asked DESC LIMIT {{limit:UInt32}}
"""

_MEMBERS_SQL = f"""
SELECT host, argMax(state, ts) AS agent_state, argMax(generation, ts) AS gen, argMax(last_step, ts) AS step,
       max(ts) AS seen, argMax(repl_buddy, ts) AS buddy, argMax(repl_pushed, ts) AS pushed,
       argMax(repl_pushed_bytes, ts) AS pushed_bytes, argMax(repl_staged, ts) AS staged,
       argMax(repl_refused, ts) AS refused, argMax(repl_last_step, ts) AS buddy_step
FROM {RECOVERY_MEMBERS} WHERE verified = 1 AND job_id = {{job:String}}
GROUP BY host ORDER BY host
"""

@dataclass(frozen=True, kw_only=True)
class Recovery:
    incident_id: str
    opened: datetime
    skipped: str  # why the controller did not act ('' when it planned)
    cls: str
    category: str
    cause: str
    summary: str
    plan: list[str]
    culprits: list[str]
    steps: list[Row] = field(default_factory=list)
    outcome: Row | None = None

    @property
    def awaiting_approval(self) -> bool:
        return "approve" in self.plan and any(s["action"] == "approve" and s["state"] == "planned" for s in self.steps)


@dataclass(frozen=True, kw_only=True)
class Goodput:
    ratio: float
    iterations: int
    step_ms: float
    wall_s: float
    costs: list[dict[str, Any]]


def recoveries(store: Store, job: str, limit: int = 20) -> list[Recovery]:
    """The job's latest recoveries, newest first, each with its steps and outcome."""
    cases = store.rows("recoveries", _CASES_SQL, {"job": job, "limit": limit})
    if not cases:
        return []
    ids = [str(c["incident_id"]) for c in cases]
    steps: dict[str, list[Row]] = {}
    for s in store.rows("recovery steps", _STEPS_SQL, {"job": job, "cases": ids}):
        steps.setdefault(str(s["incident_id"]), []).append(s)
    outcomes = {str(o["incident_id"]): o for o in store.rows("recovery outcomes", _OUTCOMES_SQL, {"job": job})}
    out = []
    for c in cases:
        d: dict[str, Any] = json.loads(c["plan"] or "{}")
        cid = str(c["incident_id"])
        out.append(Recovery(
            incident_id=cid, opened=c["opened"], skipped=str(c["why"]) if c["plan_state"] == "skipped" else "",
            cls=str(d.get("class", "")), category=str(d.get("category", "")), cause=str(d.get("cause", "")),
            summary=str(d.get("summary", "") or c["why"]), plan=[str(s) for s in d.get("steps", [])],
            culprits=[str(x.get("host", "")) for x in d.get("culprits", []) if isinstance(x, dict)],
            steps=steps.get(cid, []), outcome=outcomes.get(cid)))
    return out


def halted(recs: list[Recovery]) -> Recovery | None:
    """The recovery that halted the job and that no resume followed (what `approve` resumes)."""
    resumed = {r.incident_id.removesuffix("/resume") for r in recs if r.incident_id.endswith("/resume")}
    for r in recs:  # newest first
        if r.outcome is not None and r.outcome["result"] == "halted":
            return None if r.incident_id in resumed else r
        if r.outcome is not None and r.outcome["result"] == "resumed":
            return None
    return None


def cordons(store: Store) -> list[Row]:
    """Hosts cordoned now (cluster-wide): who, why, for which incident, when."""
    return store.rows("cordons", _CORDONS_SQL)


def requests(store: Store, job: str, limit: int = 20) -> list[Row]:
    """Operator requests (the dashboard's buttons) for this job, newest first, with how they went."""
    return store.rows("operator requests", _REQUESTS_SQL, {"job": job, "limit": limit})


def members(store: Store, job: str) -> list[Row]:
    """The job's node agents as they last reported: state, generation, last step, when, snapshot replication."""
    return store.rows("the job's agents", _MEMBERS_SQL, {"job": job})


def goodput(store: Store, job: str, recs: list[Recovery]) -> Goodput | None:
    """The job's effective training time ratio (vigil.contract.goodput, read as the Overview reads it) and
    what each recovery cost: its downtime plus its steps lost at the ideal step time (None: not known yet)."""
    h = overview.job_health(store, job).get(job)
    if h is None or h.ettr is None or h.ideal_step_ms is None or h.wall_s is None:
        return None
    costs = []
    for r in reversed(recs):  # oldest first
        o = r.outcome
        if o is None or r.cls in ("start", ""):
            continue
        lost = (o["steps_lost"] or 0) * h.ideal_step_ms / 1000
        costs.append({"incident_id": r.incident_id, "result": o["result"], "total_s": o["total_s"],
                      "steps_lost": o["steps_lost"], "lost_s": round((o["total_s"] or 0) + lost, 3)})
    return Goodput(ratio=h.ettr, iterations=h.steps, step_ms=round(h.ideal_step_ms, 3),
                   wall_s=round(h.wall_s, 3), costs=costs)
