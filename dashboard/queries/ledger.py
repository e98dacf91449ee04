"""A job's goodput ledger (vigil.contract.ledger) over a rolling window, from ClickHouse; the fleet's in GPU-hours;
the checkpoint interval the ledger implies (vigil.contract.ckpt_interval).

The window ends at the job's latest event (its clock, as ETTR's wall clock does) and starts `window_s` earlier,
or at the job's first step when that is later (None: the whole job). In it: the distinct steps completed
(one time each: the per-step mean over ranks; a step the window's start cuts, its share in the window) with their
data and SDC check phases (`job_step_runs`: a phase's mean over the ranks that ran it; the top-level phases' time
beyond the step time was timed outside the step, data loaded before it opened), the ideal step time and the
typical phase times of the whole job (a window of slowed steps is slowdown, not a new ideal; charged to hosts by
their compute time above their peers'), the saves' blocked time (the slowest rank's per save), and the
recoveries that resumed in it (not the job's start: its launch lies before the wall clock). The fleet's window ends at the latest event of any job; each job counts the part
of its clock inside it, times its GPUs (the world size of its latest step record).
"""

from __future__ import annotations

from itertools import pairwise
from statistics import median
from typing import Any

from vigil.contract.ckpt_interval import CheckpointInterval, implied
from vigil.contract.ledger import (
    DATA_PHASES,
    RESIZE_CATEGORIES,
    SDC_CATEGORIES,
    SDC_PHASES,
    FleetLedger,
    Ledger,
    StepTime,
    fleet,
    ledger,
)
from vigil.dashboard.queries import overview
from vigil.dashboard.queries.heatmap import waiting_phases
from vigil.dashboard.queries.window import Window
from vigil.dashboard.store import Store
from vigil.dashboard.tables import (
    CHECKPOINTS,
    JOB_STEP_RUNS,
    PHASE_HOST_WINDOWS,
    RECOVERY_OUTCOMES,
    STEP_TIMINGS,
)


def _mean(phases: str) -> str:
    return f"arraySum(k -> if({phases}, p.pm[k] / greatest(p.pn[k], 1), 0), mapKeys(p.pm))"


# per distinct step: its time, end, data phases in it and before it, SDC check phases
_PER_STEP = f"""
WITH steps AS ({overview.PER_STEP.format(where="WHERE job_id = {job:String}")}),
ph AS (SELECT step, sumMap(phase_ms) AS pm, sumMap(phase_n) AS pn FROM {JOB_STEP_RUNS}
       WHERE job_id = {{job:String}} GROUP BY step),
per AS (SELECT s.step AS step, s.step_ms AS step_ms, toUnixTimestamp64Milli(s.s_last_ts) AS end_ms,
               {_mean("has({data:Array(String)}, k)")} AS data_ms, {_mean("has({sdc:Array(String)}, k)")} AS sdc_ms,
               {_mean("position(k, '/') = 0")} AS top_ms
        FROM steps AS s LEFT JOIN ph AS p ON p.step = s.step)
SELECT step, step_ms, end_ms, sdc_ms, least(data_ms, greatest(0, top_ms - step_ms)) AS data_out_ms,
       data_ms - data_out_ms AS data_in_ms
FROM per"""

_STEPS_SQL = f"""
SELECT step_ms, least(1.0, (end_ms - {{since:Int64}}) / greatest(step_ms, 1e-3)) AS share, data_in_ms, data_out_ms,
       sdc_ms
FROM ({_PER_STEP}) WHERE end_ms > {{since:Int64}} ORDER BY step
"""

_TYPICAL_SQL = f"""
SELECT quantileExactInclusive(0.5)(data_in_ms) AS data_ms, quantileExactInclusive(0.5)(sdc_ms) AS sdc_ms
FROM ({_PER_STEP})
"""

_SAVES_SQL = f"""
SELECT step, maxIf(blocked_ms, phase = 'staged') AS blocked_ms, toUnixTimestamp64Milli(min(ts)) AS t_ms
FROM {CHECKPOINTS}
WHERE job_id = {{job:String}} AND toUnixTimestamp64Milli(ts) > {{since:Int64}} GROUP BY step ORDER BY t_ms
"""

_OUTCOMES_SQL = f"""
SELECT incident_id, argMax(category, ts) AS category, argMax(detect_s, ts) AS detect_s,
       argMax(decide_s, ts) AS decide_s, argMax(pause_s, ts) AS pause_s, argMax(diagnose_s, ts) AS diagnose_s,
       argMax(restart_s, ts) AS restart_s, argMax(checkpoint_load_s, ts) AS checkpoint_load_s,
       argMax(steps_lost, ts) AS steps_lost, argMax(resumed_at, ts) AS resumed
FROM {RECOVERY_OUTCOMES} WHERE verified = 1 AND job_id = {{job:String}} GROUP BY incident_id
HAVING resumed IS NOT NULL AND toUnixTimestamp64Milli(resumed) > {{since:Int64}} AND category != 'start'
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

_GPUS_SQL = f"SELECT argMax(world_size, ts) AS gpus FROM {STEP_TIMINGS} WHERE job_id = {{job:String}}"


def _clock(store: Store, job: str) -> tuple[float, float, float] | None:
    """(first step's start, job clock's end, ideal step) in epoch ms; None before the job's first step."""
    h = overview.job_health(store, job).get(job)
    if h is None or h.ideal_step_ms is None or h.wall_s is None or h.first_ms is None:
        return None
    return h.first_ms - h.ideal_step_ms, h.first_ms + h.wall_s * 1000 - h.ideal_step_ms, h.ideal_step_ms


def _since(start_ms: float, end_ms: float, window_s: float | None) -> int:
    return int(max(start_ms, end_ms - window_s * 1000) if window_s is not None else start_ms)


def _outcomes(store: Store, job: str, since: int) -> list[dict[str, Any]]:
    return store.rows("recovery outcomes", _OUTCOMES_SQL, {"job": job, "since": since})


_PHASES = {"data": list(DATA_PHASES), "sdc": list(SDC_PHASES)}


def job_ledger(store: Store, job: str, window_s: float | None = None) -> Ledger | None:
    """The job's ledger over the last `window_s` of its clock (None: all of it); None before its first step."""
    return job_ledgers(store, job, {"w": window_s})["w"]


def job_ledgers(store: Store, job: str, windows: dict[str, float | None]) -> dict[str, Ledger | None]:
    """The job's ledger over each window (by name), its clock and typical phase times read once."""
    clock = _clock(store, job)
    if clock is None:
        return dict.fromkeys(windows)
    typ = store.rows("typical phase times", _TYPICAL_SQL, {"job": job, **_PHASES})
    typical = (float(typ[0]["data_ms"] or 0), float(typ[0]["sdc_ms"] or 0)) if typ else (None, None)
    return {name: _window(store, job, clock, typical, w) for name, w in windows.items()}


def _window(store: Store, job: str, clock: tuple[float, float, float],
            typical: tuple[float | None, float | None], window_s: float | None) -> Ledger:
    start_ms, end_ms, ideal = clock
    since = _since(start_ms, end_ms, window_s)
    params = {"job": job, "since": since}
    times = [StepTime(float(r["step_ms"]), float(r["share"]), float(r["data_in_ms"] or 0),
                      float(r["data_out_ms"] or 0), float(r["sdc_ms"] or 0))
             for r in store.rows("the job's steps", _STEPS_SQL, {**params, **_PHASES})]
    saves = [float(r["blocked_ms"]) for r in store.rows("checkpoint saves", _SAVES_SQL, params)]
    waits = waiting_phases(store, Window(job=job, start_ms=since, end_ms=int(end_ms)))
    excess = {str(r["host"]): float(r["excess_ms"])
              for r in store.rows("compute time per host", _EXCESS_SQL, {**params, "waits": waits})}
    return ledger(wall_s=(end_ms - since) / 1000, ideal_ms=ideal, step_ms=times, save_blocked_ms=saves,
                  outcomes=_outcomes(store, job, since), excess_ms=excess, typical_data_ms=typical[0],
                  typical_sdc_ms=typical[1])


def fleet_ledger(store: Store, window_s: float | None = None) -> FleetLedger | None:
    """Every job's ledger over the last `window_s` of the fleet's clock (its latest event), in GPU-hours."""
    clocks = {j: c for j in overview.job_health(store) if (c := _clock(store, j)) is not None}
    if not clocks:
        return None
    fleet_end = max(end for _, end, _ in clocks.values())
    got: dict[str, tuple[Ledger, float]] = {}
    for job, (_start, end, _ideal) in clocks.items():
        left = None if window_s is None else (end - (fleet_end - window_s * 1000)) / 1000
        if left is not None and left <= 0:
            continue  # the job's clock ended before the window
        led = job_ledger(store, job, left)
        rows = store.rows("the job's world size", _GPUS_SQL, {"job": job})
        gpus = float(rows[0]["gpus"] or 0) if rows else 0.0
        if led is not None and led.wall_s > 0 and gpus > 0:
            got[job] = (led, gpus)
    return fleet(got) if got else None


def checkpoint_interval(store: Store, job: str) -> CheckpointInterval | None:
    """The availability-optimal checkpoint interval beside the job's own, from its whole history."""
    clock = _clock(store, job)
    if clock is None:
        return None
    start_ms, end_ms, _ideal = clock
    since = int(start_ms)
    saves = store.rows("checkpoint saves", _SAVES_SQL, {"job": job, "since": 0})
    blocked = [float(r["blocked_ms"]) for r in saves if r["blocked_ms"]]
    gaps = [(int(b["t_ms"]) - int(a["t_ms"])) / 1000 for a, b in pairwise(saves)]
    faults = [o for o in _outcomes(store, job, since)
              if str(o.get("category") or "") not in RESIZE_CATEGORIES | SDC_CATEGORIES]
    down = [sum(float(o.get(k) or 0) for k in ("detect_s", "decide_s", "pause_s", "diagnose_s", "restart_s"))
            for o in faults]
    return implied(wall_s=(end_ms - start_ms) / 1000, failures=len(faults),
                   save_s=sum(blocked) / len(blocked) / 1000 if blocked else None,
                   restore_s=sum(down) / len(down) if down else None,
                   current_s=float(median(gaps)) if gaps else None)
