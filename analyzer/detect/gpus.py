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

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from vigil.analyzer.detect.base import AT, EPOCH, EvalContext, Finding, as_utc, median
from vigil.analyzer.detect.phases import JobPhases, cells_sql
from vigil.analyzer.detect.slowness import Flags, Hit, findings
from vigil.analyzer.settings import StragglerSettings


def rank_candidates(ctx: EvalContext, phases: JobPhases, lo: int, hi: int, s: StragglerSettings) -> list[dict[str, Any]]:
    """Rank x compute phase x window cells slower than the host's other ranks (flagged), windows lo..hi.

    One pass groups each host's ranks (same stage) with their median and their spread
    (median absolute deviation, relative); the job's noise per phase and window is the
    median of the hosts' spreads. Only flagged cells leave ClickHouse.
    """
    cells, params = cells_sql("phase_rank_windows", "host, rank, local_rank, pp", phases)
    sql = f"""
SELECT phase, window, host, x.1 AS rank, x.2 AS local_rank, x.3 AS mean_ms, med AS host_median_ms,
       (x.3 - med) / med AS dev, noise AS mad, x.4 AS window_end
FROM (
  SELECT *, quantileExact(0.5)(rel_mad) OVER (PARTITION BY phase, window) * 1.4826 AS noise
  FROM (
    SELECT phase, window, host, pp, quantileExact(0.5)(mean_ms) AS med, count() AS size,
           groupArray((rank, local_rank, mean_ms, window_end)) AS xs,
           arrayReduce('quantileExact(0.5)', arrayMap(x -> abs(x.3 - med), xs)) / med AS rel_mad
    FROM ({cells}) GROUP BY phase, window, host, pp)
  WHERE size >= {{min_ranks:UInt32}} AND med > 0)
ARRAY JOIN xs AS x
WHERE (x.3 - med) / med * 100 >= {{slow:Float64}} AND x.3 - med >= {{excess:Float64}}
  AND (noise = 0 OR (x.3 - med) / med / noise >= {{z:Float64}})
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
        return {"gpu": self.gpu, "sm_clock_mhz": _r(self.clock_mhz), "host_sm_clock_mhz": _r(self.host_clock_mhz),
                "temp_c": _r(self.temp_c), "power_w": _r(self.power_w), "throttle_reasons": self.reasons,
                "throttled_share": round(self.slowed_share, 2)}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


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


def name_gpus(found: Sequence[Finding], gpus: Mapping[str, Sequence[GpuReading]], s: StragglerSettings,
              firing: set[str] | frozenset[str]) -> list[Finding]:
    """A slow host whose readings show exactly one slow GPU is that GPU's straggler (`host/gpuN`)."""
    out = []
    for f in found:
        readings = gpus.get(f.host, [])
        odd = gpu_outliers(readings, s)
        kept = f.subject.split("/", 1)[1] if f.subject in firing else None
        ev = {**f.evidence, "gpus_checked": len(readings)}
        if len(odd) == 1 and (kept is None or kept.startswith("gpu")):
            g = odd[0]
            ev.update(gpu_evidence(g))
            out.append(replace(f, subject=f"{f.host}/gpu{g.gpu}", evidence=ev,
                               summary=f"{f.summary}; GPU {g.gpu} is throttled ({_gpu_words(g)})"))
        else:
            ev["slow_gpus"] = [g.gpu for g in odd]
            out.append(replace(f, evidence=ev))
    return out


def gpu_evidence(g: GpuReading) -> dict[str, Any]:
    return {"gpu": g.gpu, "gpu_readings": g.evidence()}


def _gpu_words(g: GpuReading) -> str:
    parts = []
    if g.clock_mhz is not None and g.host_clock_mhz:
        parts.append(f"SM clock {g.clock_mhz:.0f} MHz vs {g.host_clock_mhz:.0f}")
    if g.reasons:
        parts.append(", ".join(g.reasons))
    if g.temp_c is not None:
        parts.append(f"{g.temp_c:.0f} C")
    return "; ".join(parts) or "no readings"


def judge_gpu_ranks(rows: Sequence[Mapping[str, Any]], s: StragglerSettings,
                    firing: set[str] | frozenset[str], hi: int) -> list[Finding]:
    """Findings `host/gpuN` from flagged rank cells (gpus.rank_candidates)."""
    flags: Flags = defaultdict(list)
    ends: dict[int, datetime] = {}
    rank_of: dict[str, int] = {}
    for r in rows:
        unit = f"{r['host']}/gpu{int(r['local_rank'])}"
        rank_of[unit] = int(r["rank"])
        mad = float(r["mad"])
        z = float(r["dev"]) / mad if mad > 0 else float("inf")
        flags[(str(r["phase"]), unit)].append(Hit(int(r["window"]), float(r["dev"]) * 100, z,
                                                  float(r["host_median_ms"]), float(r["mean_ms"])))
        w = int(r["window"])
        ends[w] = max(ends.get(w, EPOCH), as_utc(r["window_end"]))
    for w in range(max(0, hi - s.n + 1), hi + 1):
        ends.setdefault(w, max(ends.values(), default=EPOCH))
    unit_firing = {f"{f}/x" for f in firing if "/gpu" in f}  # `host/gpuN` firing -> unit `host/gpuN` is firing
    out = []
    for f in findings(flags, ends, hi, s, unit_firing, {}):
        host, _, gpu = f.host.partition("/")
        ev = {**f.evidence, "host": host, "rank": rank_of[f.host], "gpu": int(gpu[3:]), "compared": "host's ranks",
              "peer_group": "the other ranks of its host"}
        phase = f.evidence["phase"]
        out.append(replace(f, subject=f.host, host=host, evidence=ev,
                           summary=f"{host} GPU {gpu[3:]} (rank {ev['rank']}) {phase} is {ev['slowdown_pct']:.1f}% "
                                   f"slower than its host's other ranks ({ev['windows']} windows)"))
    return out


def one_per_host(found: Sequence[Finding], gpus: Mapping[str, Sequence[GpuReading]], s: StragglerSettings,
                 firing: set[str] | frozenset[str]) -> list[Finding]:
    """One GPU finding per host, with its readings. Several slow ranks on one host are one tensor-parallel
    group waiting for its slowest GPU: named by the GPU the readings single out (else the slowest rank;
    an already firing subject is kept), the other ranks in the evidence."""
    by_host: dict[str, list[Finding]] = defaultdict(list)
    for f in found:
        by_host[f.host].append(f)
    out = []
    for host, fs in by_host.items():
        readings = gpus.get(host, [])
        odd = {g.gpu for g in gpu_outliers(readings, s)}
        pick = max(fs, key=lambda f: (f.subject in firing, f.evidence["gpu"] in odd and len(odd) == 1,
                                      f.evidence["slowdown_pct"]))
        ev = {**pick.evidence, "slow_ranks": sorted(int(f.evidence["rank"]) for f in fs)}
        g = next((g for g in readings if g.gpu == pick.evidence["gpu"]), None)
        if g is not None:
            ev["gpu_readings"] = g.evidence()
        out.append(replace(pick, evidence=ev))
    return out
