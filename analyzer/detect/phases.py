"""A job's phases by kind, as the detectors judge them (see vigil/contract/phases.py).

`job_phases(ctx)` reads which phases the job reports and what its steps and its
registration declared (`job_phase_kinds`), and resolves every phase's kind (declared
by the step, else by the job, else by name). Stragglers are judged on compute phases
only, and on their *own* time: a waiting phase nested in a compute phase
(`backward/allreduce` in `backward`) is subtracted from its parent. `cells_sql` builds
that per-unit mean as SQL over a phase-window rollup, so the subtraction happens in
ClickHouse.

A window's value is its mean **without its slowest step** (`TRIMMED_MEAN`): at a few
thousand GPUs one GC pause or page fault lands in some rank's 5-step window every
window, and one +50 % step moves a 5-step mean by 10 %. A rank's window has one sample
per step, so dropping its maximum (the rollups keep it) drops its slowest step. A host's
value is the mean of its ranks' trimmed windows (`phase_rank_windows`), never a trim of
its pooled samples: one rank's pause stalls its whole tensor-parallel group in that step,
so all 8 of the host's samples carry it, and dropping the pooled maximum left 7 of them in
(+7 % on a 40-sample mean: at 512 hosts three such windows of one host in five came by
chance about once an hour); dropping 8 pooled maxima instead would take 7 healthy samples
out with a one-rank spike and bias a third of the hosts low (a 5 % straggler then hid in
the spread). Per rank, a spike of one rank and a pause of the group are both its one
slowest step. One spike is invisible; a unit slow on most of its steps stays as slow as it
is; a unit slow on a fraction of its steps keeps every slow step but its worst; every
unit is trimmed alike, so comparisons stay fair.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vigil.analyzer.detect.base import EvalContext
from vigil.analyzer.detect.kept import Source
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


TRIMMED_MEAN = "if(sum(n) >= 3, (sum(sum_ms) - max(max_ms)) / (sum(n) - 1), sum(sum_ms) / sum(n))"
"""A window's mean ms without its slowest sample (plain mean under 3 samples), over a phase-window rollup: a rank's
slowest step, over `phase_rank_windows`."""


def cells_sql(rollup: str, units: str, phases: JobPhases, *, compute: bool = True,
              waiting: bool = False) -> tuple[str, dict[str, object]]:
    """Per (phase, window, unit) mean ms of the compute and/or waiting phases over `rollup` windows lo..hi.

    Without nested waits each rank's window leaves out its slowest step (`TRIMMED_MEAN` over
    `phase_rank_windows`) and a unit's cell is the mean of its ranks' (a rank unit: its own); with them,
    the parent's plain mean minus its waits over `rollup`.

    `units` are the rollup's columns that identify a unit (`host` or `host, rank, local_rank, pp`).
    Compute phases carry their own time (nested waits subtracted); top-level waiting
    phases are taken as they are.
    """
    subs, judged = _judged(phases, compute, waiting)
    table = cells_source(rollup, phases, compute=compute, waiting=waiting).rollup
    where = "job_id = {job:String} AND window >= {lo:UInt64} AND window <= {hi:UInt64}"
    if not subs:  # the usual case: each rank's window trimmed on its own, then the unit's mean of its ranks'
        return f"""
SELECT phase, window, {units}, avg(rank_ms) AS mean_ms, sum(rank_n) AS samples, max(rank_end) AS window_end
FROM (SELECT phase, window, host, rank, local_rank, pp, {TRIMMED_MEAN} AS rank_ms, sum(n) AS rank_n,
             max(last_ts) AS rank_end
      FROM {table} WHERE {where} AND phase IN {{judged:Array(String)}}
      GROUP BY phase, window, host, rank, local_rank, pp)
GROUP BY phase, window, {units}
""", {"judged": judged}
    sql = f"""
SELECT judged AS phase, window, {units},
       (sumIf(sum_ms, NOT sub) - sumIf(sum_ms, sub)) / sumIf(n, NOT sub) AS mean_ms,
       sumIf(n, NOT sub) AS samples, max(last_ts) AS window_end
FROM (SELECT *, has({{subs:Array(String)}}, phase) AS sub,
             if(sub, {{parents:Array(String)}}[indexOf({{subs:Array(String)}}, phase)], phase) AS judged
      FROM {table}
      WHERE {where} AND (has({{judged:Array(String)}}, phase) OR has({{subs:Array(String)}}, phase)))
GROUP BY judged, window, {units}
HAVING sumIf(n, NOT sub) > 0
"""
    return sql, {"subs": [s for s, _ in subs], "parents": [p for _, p in subs], "judged": judged}


def cells_source(rollup: str, phases: JobPhases, *, compute: bool = True, waiting: bool = False) -> Source:
    """What `cells_sql` with the same arguments reads (it takes its table from here): its rollup and the phases whose
    rows make its cells (a kept read is complete when they are all there, kept.py)."""
    subs, judged = _judged(phases, compute, waiting)
    return Source(rollup="phase_rank_windows" if not subs else rollup, phases=judged + [s for s, _ in subs])


def _judged(phases: JobPhases, compute: bool, waiting: bool) -> tuple[list[tuple[str, str]], list[str]]:
    """(the nested waits subtracted, the phases judged) of a cells read."""
    subs = phases.nested_waits if compute else []
    return subs, (phases.compute if compute else []) + (phases.waiting if waiting else [])
