"""A job's phases by kind, as the detectors judge them (see vigil/contract/phases.py).

`job_phases(ctx)` reads which phases the job reports and what its steps and its
registration declared (`job_phase_kinds`), and resolves every phase's kind (declared
by the step, else by the job, else by name). Stragglers are judged on compute phases
only, and on their *own* time: a waiting phase nested in a compute phase
(`backward/allreduce` in `backward`) is subtracted from its parent. `cells_sql` builds
that per-unit mean as SQL over a phase-window rollup, so the subtraction happens in
ClickHouse.

A window's value is its mean **without its slowest step** (`TRIMMED_MEAN`): at a few
thousand GPUs one GC pause or page fault lands in some unit's 5-step window every
window, and one +50 % step moves a 5-step mean by 10 %. A rank's window has one sample
per step, so its maximum is dropped; a host's has one per rank and step, and a pause of
one rank stalls its whole tensor-parallel group in that step (every rank of the host
waits inside each layer), so the window's `samples / 5` slowest samples are dropped, taken
at the maximum (the rollups keep it: a host's slowest step is its ranks at about that
level). Dropping only the one slowest sample of a host's 40 left 7 of a pause's 8 in the
mean: at 512 hosts three such windows of one host out of five came by chance about once
an hour (bench/detection_physics.py's 512-host healthy job). One spike is invisible; a
unit slow on most of its steps stays as slow as it is; a unit slow on a fraction of its
steps keeps every slow step but the worst; every unit is trimmed alike, so comparisons
stay fair.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vigil.analyzer.detect.base import EvalContext
from vigil.analyzer.settings import ROLLUP_WINDOW_STEPS
from vigil.contract.phases import PhaseKind, is_waiting, parent, resolve

# the phases reported in windows lo..hi (source '') and every declaration of the job, in one query
_PHASES_SQL = """
SELECT DISTINCT phase, '' AS source, '' AS kind FROM phase_host_windows
WHERE job_id = {job:String} AND window >= {lo:UInt64} AND window <= {hi:UInt64}
UNION ALL
SELECT phase, source, argMax(phase_kind, ts) AS kind FROM job_phase_kinds
WHERE job_id = {job:String} GROUP BY phase, source
"""


@dataclass(frozen=True, kw_only=True)
class JobPhases:
    kinds: dict[str, PhaseKind] = field(default_factory=dict)

    @property
    def compute(self) -> list[str]:
        """Compute phases judged on their own (top-level, or nested under another compute phase)."""
        return sorted(p for p, k in self.kinds.items() if k == "compute")

    @property
    def waiting(self) -> list[str]:
        """Top-level waiting phases: where ranks wait for a slow peer."""
        return sorted(p for p, k in self.kinds.items() if is_waiting(k) and parent(p) is None)

    @property
    def nested_waits(self) -> list[tuple[str, str]]:
        """(waiting phase, its compute parent): time the parent spent waiting, subtracted from it."""
        out = []
        for p, k in self.kinds.items():
            up = parent(p)
            if is_waiting(k) and up is not None and self.kinds.get(up) == "compute":
                out.append((p, up))
        return sorted(out)


def job_phases(ctx: EvalContext, lo: int, hi: int) -> JobPhases:
    """Kinds of the phases the job reported in windows lo..hi."""
    phases: list[str] = []
    step: dict[str, str] = {}
    job: dict[str, str] = {}
    for r in ctx.rows(_PHASES_SQL, lo=lo, hi=hi):
        if r["source"] == "":
            phases.append(str(r["phase"]))
        else:
            (step if r["source"] == "step" else job)[str(r["phase"])] = str(r["kind"])
    return JobPhases(kinds=resolve(phases, step, job)) if phases else JobPhases()


_PER_STEP = f"greatest(1, intDiv(sum(n), {ROLLUP_WINDOW_STEPS}))"  # samples of one step: a unit's ranks
TRIMMED_MEAN = (f"if(sum(n) >= 3 AND sum(n) > {_PER_STEP}, (sum(sum_ms) - {_PER_STEP} * max(max_ms)) / "
                f"(sum(n) - {_PER_STEP}), sum(sum_ms) / sum(n))")
"""A window's mean ms without its slowest step (`samples / 5` samples at the window's maximum; plain mean under 3
samples), over a phase-window rollup."""


def cells_sql(rollup: str, units: str, phases: JobPhases, *, compute: bool = True,
              waiting: bool = False) -> tuple[str, dict[str, object]]:
    """Per (phase, window, unit) mean ms of the compute and/or waiting phases over `rollup` windows lo..hi.

    Without nested waits the mean leaves out the window's slowest sample (`TRIMMED_MEAN`);
    with them, the parent's plain mean minus its waits.

    `units` are the rollup's columns that identify a unit (`host` or `host, rank, local_rank, pp`).
    Compute phases carry their own time (nested waits subtracted); top-level waiting
    phases are taken as they are.
    """
    subs = phases.nested_waits if compute else []
    judged = (phases.compute if compute else []) + (phases.waiting if waiting else [])
    where = "job_id = {job:String} AND window >= {lo:UInt64} AND window <= {hi:UInt64}"
    if not subs:  # the usual case: nothing to subtract
        return f"""
SELECT phase, window, {units}, {TRIMMED_MEAN} AS mean_ms, sum(n) AS samples, max(last_ts) AS window_end
FROM {rollup} WHERE {where} AND phase IN {{judged:Array(String)}}
GROUP BY phase, window, {units}
""", {"judged": judged}
    sql = f"""
SELECT judged AS phase, window, {units},
       (sumIf(sum_ms, NOT sub) - sumIf(sum_ms, sub)) / sumIf(n, NOT sub) AS mean_ms,
       sumIf(n, NOT sub) AS samples, max(last_ts) AS window_end
FROM (SELECT *, has({{subs:Array(String)}}, phase) AS sub,
             if(sub, {{parents:Array(String)}}[indexOf({{subs:Array(String)}}, phase)], phase) AS judged
      FROM {rollup}
      WHERE {where} AND (has({{judged:Array(String)}}, phase) OR has({{subs:Array(String)}}, phase)))
GROUP BY judged, window, {units}
HAVING sumIf(n, NOT sub) > 0
"""
    return sql, {"subs": [s for s, _ in subs], "parents": [p for _, p in subs], "judged": judged}
