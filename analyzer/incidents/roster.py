"""A job's ranks as of an instant: host, local rank, 3D coordinates, last step and when it ended.

From the newest `steps` steps of `step_timings` of the job's current run (its key starts
with (job_id, step), so the read stays narrow however long the job ran), completed by the
job's newest registration (a `job` event lists every rank of its launch) for ranks that
never stepped. A job restarted on fewer hosts has fewer ranks, and from an older step:
neither the previous run's steps nor its registration's extra ranks count. Placement and
coordinates name culprits and victims; the last steps tell when a job stopped making
progress and who stopped first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vigil.analyzer.detect.base import AT, EvalContext, as_utc

_STEPS_SQL = f"""
SELECT rank, argMax(host, ts) AS host, argMax(local_rank, ts) AS local_rank, argMax(dp, ts) AS dp,
       argMax(tp, ts) AS tp, argMax(pp, ts) AS pp, max(step) AS last_step, max(ts) AS last_ts,
       max(world_size) AS world_size
FROM step_timings
WHERE job_id = {{job:String}} AND ts <= {AT} AND ts >= {{since:DateTime64(3, 'UTC')}}
  AND step + {{steps:UInt64}} >= (SELECT ifNull(max(step), 0) FROM job_steps
                                  WHERE job_id = {{job:String}} AND first_ts <= {AT}
                                    AND first_ts >= {{since:DateTime64(3, 'UTC')}})
GROUP BY rank
"""

_REGISTERED_SQL = f"""
SELECT rank, host, local_rank, dp, tp, pp FROM job_ranks FINAL WHERE job_id = {{job:String}} AND ts <= {AT}
  AND ts = (SELECT max(ts) FROM job_ranks WHERE job_id = {{job:String}} AND ts <= {AT})
"""


@dataclass(frozen=True, kw_only=True)
class RankInfo:
    rank: int
    host: str
    local_rank: int | None = None
    dp: int = 0
    tp: int = 0
    pp: int = 0
    last_step: int | None = None
    last_ts: datetime | None = None
    world_size: int | None = None

    @property
    def coords(self) -> dict[str, int]:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp}


def roster_of(steps: Iterable[Mapping[str, Any]], registered: Iterable[Mapping[str, Any]] = ()) -> dict[int, RankInfo]:
    """Rank -> what is known of it; the registration wins for placement, the steps give progress."""
    out: dict[int, RankInfo] = {}
    for r in steps:
        out[int(r["rank"])] = RankInfo(rank=int(r["rank"]), host=str(r["host"]), local_rank=int(r["local_rank"]),
                                       dp=int(r["dp"]), tp=int(r["tp"]), pp=int(r["pp"]),
                                       last_step=int(r["last_step"]), last_ts=as_utc(r["last_ts"]),
                                       world_size=int(r["world_size"]))
    for r in registered:
        rank = int(r["rank"])
        seen = out.get(rank)
        out[rank] = RankInfo(rank=rank, host=str(r["host"]), local_rank=int(r["local_rank"]), dp=int(r["dp"]),
                             tp=int(r["tp"]), pp=int(r["pp"]), last_step=seen.last_step if seen else None,
                             last_ts=seen.last_ts if seen else None, world_size=seen.world_size if seen else None)
    return out


def world(roster: Mapping[int, RankInfo]) -> set[int]:
    """Every rank the job has: those known, and 0..world_size-1."""
    size = max((r.world_size or 0 for r in roster.values()), default=0)
    return set(roster) | set(range(size))


def read_roster(ctx: EvalContext, steps: int = 50) -> dict[int, RankInfo]:
    return roster_of(ctx.rows(_STEPS_SQL, steps=steps, since=ctx.run_start()), ctx.rows(_REGISTERED_SQL))
