"""Per-GPU stragglers: one slow rank among its host's ranks, and the GPU evidence that names it.

Two shapes of one slow GPU (a thermally throttled one, say):

* its rank is its own tensor-parallel group (tp < GPUs per host): its compute phases are
  slower than the other ranks of its host. Each rank is compared, per 5-step window
  (`phase_rank_windows`), with the median of its host's ranks in the same pipeline stage
  (they share the host's bias, so like is compared with like), and flagged when it is at
  least `min_slowdown_pct` and `min_excess_ms` slower and its robust z (against the spread
  of every rank's deviation from its host, job-wide) is at least `z`. The SQL returns only
  flagged cells, so a 10,000-GPU job costs a few rows.
* its rank shares a tensor-parallel group with the host's other ranks (tp = GPUs per host):
  every rank waits for it inside each layer and the whole host is slow. The host-level
  detector finds the host; `gpu_outliers` then names the GPU from the heartbeats' readings
  (`gpu_stats`): a slowdown throttle reason (`hw_slowdown`, `*_thermal_slowdown`, ...) on
  most of its readings, or an SM clock `gpu_clock_drop_pct` below its host's median.
  A benign reason such as `sw_power_cap` is not evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vigil.analyzer.detect.base import AT, EvalContext, median
from vigil.analyzer.detect.phases import JobPhases, cells_sql
from vigil.analyzer.settings import StragglerSettings


def rank_candidates(ctx: EvalContext, phases: JobPhases, lo: int, hi: int, s: StragglerSettings) -> list[dict[str, Any]]:
    """Rank x compute phase x window cells slower than the host's other ranks (flagged), windows lo..hi."""
    cells, params = cells_sql("phase_rank_windows", "host, rank, local_rank, pp", phases)
    sql = f"""
SELECT phase, window, host, rank, local_rank, mean_ms, med AS host_median_ms, dev, mad, window_end FROM (
  SELECT *, quantileExact(0.5)(abs(dev)) OVER (PARTITION BY phase, window) * 1.4826 AS mad FROM (
    SELECT *, if(med > 0, (mean_ms - med) / med, 0) AS dev FROM (
      SELECT *, quantileExact(0.5)(mean_ms) OVER (PARTITION BY phase, window, host, pp) AS med,
                count() OVER (PARTITION BY phase, window, host, pp) AS size
      FROM ({cells}))
    WHERE size >= {{min_ranks:UInt32}}))
WHERE dev * 100 >= {{slow:Float64}} AND mean_ms - med >= {{excess:Float64}} AND (mad = 0 OR dev / mad >= {{z:Float64}})
"""
    return ctx.rows(sql, **params, lo=lo, hi=hi, min_ranks=s.min_hosts, slow=s.min_slowdown_pct,
                    excess=s.min_excess_ms, z=s.z)


_GPU_SQL = f"""
SELECT host, gpu, avg(sm_clock_mhz) AS clock, max(temp_c) AS temp, avg(power_w) AS power,
       arrayDistinct(arrayFlatten(groupArray(throttle_reasons))) AS reasons,
       countIf(arrayExists(x -> positionCaseInsensitive(x, 'slowdown') > 0, throttle_reasons)) AS slowed,
       count() AS readings
FROM gpu_stats
WHERE job_id = {{job:String}} AND has({{hosts:Array(String)}}, host) AND ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT}
GROUP BY host, gpu ORDER BY host, gpu
"""


@dataclass(frozen=True, kw_only=True)
class GpuReading:
    host: str
    gpu: int
    clock_mhz: float | None
    host_clock_mhz: float | None  # median of the host's GPUs
    temp_c: float | None
    power_w: float | None
    reasons: list[str]
    slowed_share: float  # readings with a slowdown throttle reason

    def evidence(self) -> dict[str, Any]:
        r = lambda v: None if v is None else round(v, 1)  # noqa: E731
        return {"gpu": self.gpu, "sm_clock_mhz": r(self.clock_mhz), "host_sm_clock_mhz": r(self.host_clock_mhz),
                "temp_c": r(self.temp_c), "power_w": r(self.power_w), "throttle_reasons": self.reasons,
                "throttled_share": round(self.slowed_share, 2)}


def gpu_readings(ctx: EvalContext, hosts: Sequence[str], s: StragglerSettings) -> dict[str, list[GpuReading]]:
    """Recent per-GPU readings of `hosts`, each with its host's median SM clock."""
    if not hosts:
        return {}
    rows = ctx.rows(_GPU_SQL, hosts=sorted(hosts), lo=ctx.ago(s.gpu_lookback_s))
    return readings(rows)


def readings(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[GpuReading]]:
    by_host: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_host.setdefault(str(r["host"]), []).append(r)
    out: dict[str, list[GpuReading]] = {}
    for host, rs in by_host.items():
        clocks = [float(r["clock"]) for r in rs if r["clock"] is not None]
        mid = median(clocks) if clocks else None
        out[host] = [GpuReading(
            host=host, gpu=int(r["gpu"]), clock_mhz=None if r["clock"] is None else float(r["clock"]),
            host_clock_mhz=mid, temp_c=None if r["temp"] is None else float(r["temp"]),
            power_w=None if r["power"] is None else float(r["power"]), reasons=sorted(str(x) for x in r["reasons"]),
            slowed_share=int(r["slowed"]) / max(1, int(r["readings"]))) for r in rs]
    return out


def gpu_outliers(gpus: Sequence[GpuReading], s: StragglerSettings) -> list[GpuReading]:
    """The host's GPUs that look slow: throttled for slowdown on most readings, or clocked below the host's median."""
    out = []
    for g in gpus:
        low_clock = (g.clock_mhz is not None and g.host_clock_mhz
                     and g.clock_mhz < g.host_clock_mhz * (1 - s.gpu_clock_drop_pct / 100))
        if g.slowed_share >= 0.5 or low_clock:
            out.append(g)
    return sorted(out, key=lambda g: (-(g.slowed_share), g.clock_mhz or 0.0))
