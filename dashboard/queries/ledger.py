"""A job's goodput ledger (vigil.contract.ledger) over a rolling window, from ClickHouse.

The window ends at the job's latest event (its clock, as ETTR's wall clock does) and starts `window_s` earlier,
or at the job's first step when that is later (None: the whole job). In it: the distinct steps completed
(one time each: the per-step mean over ranks; a step the window's start cuts, its share in the window), the ideal step time of the whole job (a window of slowed steps
is slowdown, not a new ideal; charged to hosts by their compute time above their peers'), the saves' blocked time (the slowest rank's per save), and the recoveries that
resumed in it.
"""

from __future__ import annotations

from vigil.contract.ledger import Ledger, ledger
from vigil.dashboard.queries import overview
from vigil.dashboard.queries.heatmap import waiting_phases
from vigil.dashboard.queries.window import Window
from vigil.dashboard.store import Store
from vigil.dashboard.tables import CHECKPOINTS, PHASE_HOST_WINDOWS, RECOVERY_OUTCOMES

_STEPS_SQL = f"""
WITH steps AS ({overview.PER_STEP.format(where="WHERE job_id = {job:String}")})
SELECT step_ms, least(1.0, (toUnixTimestamp64Milli(s_last_ts) - {{since:Int64}}) / greatest(step_ms, 1e-3)) AS share
FROM steps WHERE toUnixTimestamp64Milli(s_last_ts) > {{since:Int64}} ORDER BY step
"""

_SAVES_SQL = f"""
SELECT step, maxIf(blocked_ms, phase = 'staged') AS blocked_ms FROM {CHECKPOINTS}
WHERE job_id = {{job:String}} AND toUnixTimestamp64Milli(ts) > {{since:Int64}} GROUP BY step
"""

_OUTCOMES_SQL = f"""
SELECT incident_id, argMax(detect_s, ts) AS detect_s, argMax(decide_s, ts) AS decide_s,
       argMax(pause_s, ts) AS pause_s, argMax(diagnose_s, ts) AS diagnose_s, argMax(restart_s, ts) AS restart_s,
       argMax(checkpoint_load_s, ts) AS checkpoint_load_s, argMax(steps_lost, ts) AS steps_lost,
       argMax(resumed_at, ts) AS resumed
FROM {RECOVERY_OUTCOMES} WHERE verified = 1 AND job_id = {{job:String}} GROUP BY incident_id
HAVING resumed IS NOT NULL AND toUnixTimestamp64Milli(resumed) > {{since:Int64}}
"""

# per host, its compute time above the median host's per phase (waits and collectives excluded: there the
# straggler's peers wait for it), times its occurrences
_EXCESS_SQL = f"""
WITH per AS (SELECT host, phase, sum(sum_ms) / greatest(sum(n), 1) AS mean_ms, sum(n) AS runs FROM {PHASE_HOST_WINDOWS}
             WHERE job_id = {{job:String}} AND toUnixTimestamp64Milli(last_ts) > {{since:Int64}}
               AND phase NOT IN {{waits:Array(String)}} GROUP BY host, phase),
med AS (SELECT phase, quantileExactInclusive(0.5)(mean_ms) AS med FROM per GROUP BY phase)
SELECT p.host AS host, sum(greatest(0, p.mean_ms - m.med) * p.runs) AS excess_ms
FROM per AS p INNER JOIN med AS m ON m.phase = p.phase GROUP BY p.host
"""


def job_ledger(store: Store, job: str, window_s: float | None = None) -> Ledger | None:
    """The job's ledger over the last `window_s` of its clock (None: all of it); None before its first step."""
    h = overview.job_health(store, job).get(job)
    if h is None or h.ideal_step_ms is None or h.wall_s is None or h.first_ms is None:
        return None
    end_ms = h.first_ms + h.wall_s * 1000 - h.ideal_step_ms  # the job clock (ETTR's wall clock's end)
    start_ms = h.first_ms - h.ideal_step_ms
    since = int(max(start_ms, end_ms - window_s * 1000) if window_s is not None else start_ms)
    params = {"job": job, "since": since}
    times = [(float(r["step_ms"]), float(r["share"])) for r in store.rows("the job's steps", _STEPS_SQL, params)]
    saves = [float(r["blocked_ms"]) for r in store.rows("checkpoint saves", _SAVES_SQL, params)]
    outs = store.rows("recovery outcomes", _OUTCOMES_SQL, params)
    waits = waiting_phases(store, Window(job=job, start_ms=since, end_ms=int(end_ms)))
    excess = {str(r["host"]): float(r["excess_ms"])
              for r in store.rows("compute time per host", _EXCESS_SQL, {**params, "waits": waits})}
    return ledger(wall_s=(end_ms - since) / 1000, ideal_ms=h.ideal_step_ms, step_ms=times, save_blocked_ms=saves,
                  outcomes=outs, excess_ms=excess)
