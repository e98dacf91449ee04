"""3D-parallel view: each rank's phase (or step) time over the time range, laid out by its (dp, pp, tp) coordinates.

The range's steps come from the `job_steps` rollup (steps whose time overlaps the window);
at most `steps` of them are read from `step_timings`, evenly spaced and ending at the
range's last step. Its primary key starts with (job_id, step), so the read stays narrow
and its cost does not grow with the range; the per-rank means are aggregated in ClickHouse.

All ranks of a synchronous job report the same step time (the fast ones wait for the slow
one inside the step), so the whole step shows nothing. By default the view shows the phase
where one rank stands out most (largest max - median of the per-rank means: the slow rank's
own work, not the others' waiting); `STEP` asks for the whole step. Each rank also gets a
state: culprit or victim of the job's incident, exited (with its error), slow, training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vigil.dashboard.queries.incidents import IncidentRow
from vigil.dashboard.queries.window import Window
from vigil.dashboard.store import Store
from vigil.dashboard.tables import JOB_RANKS, JOB_STEPS, PROCESS_EXITS, STEP_TIMINGS

STEP = "_step"  # the whole step (a name the timer reserves, so no phase is called so)
SLOW_PCT = 5.0  # a rank this much above the median of the shown time is "slow"

_STEPS_IN_RANGE = (f"FROM {JOB_STEPS} WHERE job_id = {{job:String}} "
                   "AND last_ts >= fromUnixTimestamp64Milli({t0:Int64}, 'UTC') "
                   "AND first_ts <= fromUnixTimestamp64Milli({t1:Int64}, 'UTC')")

_SQL = f"""
SELECT *, quantileExactLow(0.5)(mean_ms) OVER () AS median_ms FROM (
WITH (SELECT minOrNull(step) {_STEPS_IN_RANGE}) AS lo, (SELECT maxOrNull(step) {_STEPS_IN_RANGE}) AS hi,
     intDiv(hi - lo + {{steps:UInt64}}, {{steps:UInt64}}) AS every
SELECT rank, any(host) AS host, any(dp) AS dp, any(tp) AS tp, any(pp) AS pp,
       avg(if({{phase:String}} = '', step_ms, phases[{{phase:String}}])) AS mean_ms, count() AS samples,
       min(step) AS first_step, max(step) AS last_step, any(every) AS stride,
       toUnixTimestamp64Milli(max(ts)) AS last_ms
FROM {STEP_TIMINGS}
WHERE job_id = {{job:String}} AND step >= lo AND step <= hi AND (hi - step) % every = 0
      AND ({{phase:String}} = '' OR mapContains(phases, {{phase:String}}))
GROUP BY rank) ORDER BY rank
"""


_SPREAD_SQL = f"""
WITH (SELECT minOrNull(step) {_STEPS_IN_RANGE}) AS lo, (SELECT maxOrNull(step) {_STEPS_IN_RANGE}) AS hi,
     intDiv(hi - lo + {{steps:UInt64}}, {{steps:UInt64}}) AS every
SELECT phase, max(m) - quantileExactLow(0.5)(m) AS spread FROM (
    SELECT rank, phase, avg(ms) AS m FROM {STEP_TIMINGS}
    ARRAY JOIN mapKeys(phases) AS phase, mapValues(phases) AS ms
    WHERE job_id = {{job:String}} AND step >= lo AND step <= hi AND (hi - step) % every = 0
      AND NOT startsWith(phase, '_')
    GROUP BY rank, phase)
GROUP BY phase HAVING count() > 1 ORDER BY spread DESC, phase LIMIT 1
"""

_EXITS_SQL = f"""
SELECT rank, argMax(host, ts) AS host, argMax(exit_code, ts) AS code, argMax(signal, ts) AS sig,
       argMax(summary, ts) AS message, toUnixTimestamp64Milli(max(ts)) AS exit_ms
FROM {PROCESS_EXITS}
WHERE job_id = {{job:String}} AND rank IS NOT NULL AND launcher = 0
  AND ts >= fromUnixTimestamp64Milli({{t0:Int64}}, 'UTC')
GROUP BY rank HAVING ifNull(code, 0) != 0 OR sig != ''
"""

_HOST_AT_SQL = f"""
SELECT host, rank FROM (
    SELECT host, rank, 0 AS pref FROM {JOB_RANKS} FINAL
    WHERE job_id = {{job:String}} AND dp = {{dp:UInt32}} AND pp = {{pp:UInt32}} AND tp = {{tp:UInt32}}
    UNION ALL
    SELECT host, rank, 1 AS pref FROM {STEP_TIMINGS}
    WHERE job_id = {{job:String}} AND dp = {{dp:UInt32}} AND pp = {{pp:UInt32}} AND tp = {{tp:UInt32}}
      AND step = (SELECT max(step) FROM {STEP_TIMINGS} WHERE job_id = {{job:String}}))
ORDER BY pref LIMIT 1
"""


@dataclass(frozen=True, kw_only=True)
class RankCell:
    rank: int
    host: str
    dp: int
    tp: int
    pp: int
    mean_ms: float
    median_ms: float  # lower median over all ranks (as the heatmap's: a 2-rank job's slow rank reads slower)

    @property
    def dev(self) -> float:
        return (self.mean_ms - self.median_ms) / self.median_ms if self.median_ms > 0 else 0.0


@dataclass(frozen=True, kw_only=True)
class ParallelView:
    phase: str  # '' = whole step
    first_step: int
    last_step: int
    stride: int  # every `stride`-th step of the range was read (1: all of them)
    ranks: list[RankCell]
    auto: bool = False  # the phase was picked as the one where a rank stands out most
    last_ms: dict[int, int] | None = None  # each rank's newest step read (epoch ms)


def standout_phase(store: Store, win: Window, *, steps: int = 50) -> str | None:
    """The phase whose slowest rank is furthest above the median rank (None: no phases)."""
    row = store.one("the phase that stands out", _SPREAD_SQL, win.params(steps=max(1, steps)))
    return str(row["phase"]) if row and float(row["spread"] or 0) > 0 else None


def parallel_view(store: Store, win: Window, *, phase: str | None, steps: int = 50) -> ParallelView:
    """Per-rank means over the range's steps (at most `steps` of them, evenly spaced, the last one included).

    `phase` None picks the phase that stands out (`standout_phase`); `STEP` or '' is the whole step.
    """
    auto = phase is None
    chosen = standout_phase(store, win, steps=steps) if auto else (None if phase == STEP else phase)
    rows = store.rows("per-rank times", _SQL, win.params(phase=chosen or "", steps=max(1, steps)))
    cells = [RankCell(rank=int(r["rank"]), host=str(r["host"]), dp=int(r["dp"]), tp=int(r["tp"]), pp=int(r["pp"]),
                      mean_ms=float(r["mean_ms"]), median_ms=float(r["median_ms"])) for r in rows]
    return ParallelView(phase=chosen or "", first_step=min((int(r["first_step"]) for r in rows), default=0),
                        last_step=max((int(r["last_step"]) for r in rows), default=0),
                        stride=max((int(r["stride"]) for r in rows), default=1), ranks=cells, auto=auto and bool(chosen),
                        last_ms={int(r["rank"]): int(r["last_ms"]) for r in rows})


@dataclass(frozen=True, kw_only=True)
class RankState:
    rank: int
    state: str  # culprit | victim | exited | slow | training
    message: str = ""


STATE_ORDER = ("culprit", "victim", "exited", "slow", "training")


def exits(store: Store, win: Window) -> dict[int, tuple[int, str]]:
    """Rank -> (when it exited, epoch ms; its own last error) for the ranks that failed since the range began
    (a job's last exits come after its last step, so after the window's end)."""
    out: dict[int, tuple[int, str]] = {}
    for r in store.rows("rank exits", _EXITS_SQL, win.params()):
        how = f"signal {r['sig']}" if r["sig"] else f"exit code {r['code']}"
        out[int(r["rank"])] = (int(r["exit_ms"]), f"exited ({how}): {r['message']}" if r["message"] else f"exited ({how})")
    return out


def rank_states(v: ParallelView, incident: IncidentRow | None, exited: dict[int, tuple[int, str]],
                slow_pct: float = SLOW_PCT) -> dict[int, RankState]:
    """Each rank's state: its incident role first, then exited (and not stepping since), slow, training."""
    out: dict[int, RankState] = {}
    for cell in v.ranks:
        if cell.dev * 100 >= slow_pct:
            out[cell.rank] = RankState(rank=cell.rank, state="slow", message=f"{100 * cell.dev:+.1f}% vs median")
        else:
            out[cell.rank] = RankState(rank=cell.rank, state="training")
    last = v.last_ms or {}
    for rank, (when, message) in exited.items():
        if when >= last.get(rank, 0):
            out[rank] = RankState(rank=rank, state="exited", message=message)
    if incident is not None:
        for p in incident.victims:
            if p.rank is not None:
                out[p.rank] = RankState(rank=p.rank, state="victim", message=p.message)
        for p in incident.culprits:
            if p.rank is not None:
                out[p.rank] = RankState(rank=p.rank, state="culprit", message=p.message)
    return out


def groups_of(ranks: Sequence[RankCell], rank: int) -> dict[str, list[int]]:
    """The ranks `rank` communicates with: its tensor-, pipeline- and data-parallel groups (itself included)."""
    me = next((r for r in ranks if r.rank == rank), None)
    if me is None:
        return {}
    return {
        "tp": sorted(r.rank for r in ranks if r.dp == me.dp and r.pp == me.pp),
        "pp": sorted(r.rank for r in ranks if r.dp == me.dp and r.tp == me.tp),
        "dp": sorted(r.rank for r in ranks if r.pp == me.pp and r.tp == me.tp),
    }


def host_at(store: Store, job: str, *, dp: int, pp: int, tp: int) -> str | None:
    """The host of the rank at (dp, pp, tp) in `job` (from the job's rank table, else its step timings)."""
    row = store.one("the rank's host", _HOST_AT_SQL, {"job": job, "dp": dp, "pp": pp, "tp": tp})
    return str(row["host"]) if row and row["host"] else None


def rank_at(store: Store, job: str, *, dp: int, pp: int, tp: int) -> int | None:
    """The rank at (dp, pp, tp) in `job`."""
    row = store.one("the rank at a cell", _HOST_AT_SQL, {"job": job, "dp": dp, "pp": pp, "tp": tp})
    return int(row["rank"]) if row and row["rank"] is not None else None
