"""Traffic stall: each NIC's throughput against its own recent baseline.

Training traffic is periodic, so a NIC's mean rate over `traffic.recent_s` is stable
against its mean over the `traffic.baseline_s` before that. A drop of at least
`traffic.drop_pct` -> warning. Zero traffic (<= `traffic.zero_bps`) for at least
`traffic.stall_s` while the host's training processes run -> critical. NICs whose
baseline is below `traffic.min_baseline_bps` (idle management ports) are not judged.
While an alert fires, the reference is the larger of the NIC's own baseline and the
fleet median for that device, so a lasting drop does not become its own new normal.

When at least half of the job's judged NICs (and `traffic.fleet_min_nics` or more) drop
or stop together, it is the job, not the NICs: a checkpoint, an evaluation, or a hang
of every rank. That is one job-level warning (subject `job`) instead of a page per NIC.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from vigil.analyzer.detect.base import AT, EPOCH, EvalContext, Finding, as_utc, median
from vigil.analyzer.settings import TrafficSettings

_NIC_SQL = f"""
SELECT host, device,
       max(ts) AS last_ts,
       maxIf(ts, tx_bps + rx_bps > {{zero:Float64}}) AS last_nonzero,
       avgIf(tx_bps + rx_bps, ts > {{recent:DateTime64(3, 'UTC')}}) AS recent_bps,
       countIf(ts > {{recent:DateTime64(3, 'UTC')}}) AS n_recent,
       avgIf(tx_bps + rx_bps, ts <= {{recent:DateTime64(3, 'UTC')}}) AS base_bps,
       countIf(ts <= {{recent:DateTime64(3, 'UTC')}}) AS n_base
FROM nic_counters
WHERE job_id = {{job:String}} AND ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT}
GROUP BY host, device
"""

_RUNNING_SQL = f"""
SELECT host, max(procs_running) AS running FROM heartbeats
WHERE job_id = {{job:String}} AND ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT}
GROUP BY host
"""


class TrafficDetector:
    name = "traffic_stall"

    def detect(self, ctx: EvalContext) -> list[Finding]:
        s = ctx.settings.traffic
        rows = ctx.rows(_NIC_SQL, zero=s.zero_bps, recent=ctx.ago(s.recent_s),
                        lo=ctx.ago_in_run(s.recent_s + s.baseline_s))
        running = {str(r["host"]): int(r["running"]) for r in ctx.rows(_RUNNING_SQL, lo=ctx.ago(s.stall_s))}
        firing = {subj.split(":", 1)[1] for subj in ctx.firing if subj.startswith("traffic_stall:")}
        return judge(rows, running, s, ctx.at, firing)


def judge(rows: Sequence[Mapping[str, Any]], running: Mapping[str, int], s: TrafficSettings, at: datetime,
          firing: set[str] | frozenset[str] = frozenset()) -> list[Finding]:
    fleet: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if int(r["n_base"]) and float(r["base_bps"]) >= s.min_baseline_bps:
            fleet[str(r["device"])].append(float(r["base_bps"]))
    fleet_median = {d: median(v) for d, v in fleet.items()}
    out: list[Finding] = []
    judged = 0
    for r in rows:
        host, device = str(r["host"]), str(r["device"])
        subject = f"{host}/{device}"
        if int(r["n_recent"]) == 0:
            continue  # no fresh samples: a silent host is the heartbeat detector's call
        base = float(r["base_bps"]) if int(r["n_base"]) else 0.0
        was = subject in firing
        ref = max(base, fleet_median.get(device, 0.0)) if was else base
        if ref < s.min_baseline_bps and not was:
            continue
        judged += 1
        recent = float(r["recent_bps"])
        last, nonzero = as_utc(r["last_ts"]), as_utc(r["last_nonzero"])
        stalled_s = (last - nonzero).total_seconds() if nonzero > EPOCH else None
        evidence = {"host": host, "device": device, "recent_bps": round(recent), "baseline_bps": round(ref),
                    "recent_s": s.recent_s}
        procs = running.get(host, 1)
        if procs > 0 and ((stalled_s is not None and stalled_s >= s.stall_s) or (stalled_s is None and was)):
            since = nonzero + timedelta(seconds=s.stall_s) if stalled_s is not None else at
            zero_for = f"{stalled_s:.0f} s" if stalled_s is not None else "the whole lookback"
            out.append(Finding(
                alert="traffic_stall", subject=subject, host=host, severity="critical", since=since,
                summary=f"{host} {device}: no traffic for {zero_for} while training runs",
                evidence={**evidence, "zero_s": stalled_s, "last_traffic": nonzero.isoformat()}))
        elif ref > 0:
            drop = (1 - recent / ref) * 100
            need = s.drop_pct / 2 if was else s.drop_pct
            if drop >= need:
                out.append(Finding(
                    alert="traffic_stall", subject=subject, host=host, severity="warning", since=at,
                    summary=f"{host} {device}: traffic {drop:.0f}% below its baseline",
                    evidence={**evidence, "drop_pct": round(drop, 1)}))
    if judged >= s.fleet_min_nics and len(out) * 2 >= judged:
        return [job_wide(out, judged)]
    return out


def job_wide(down: Sequence[Finding], judged: int) -> Finding:
    stopped = sorted(f.subject for f in down if f.severity == "critical")
    return Finding(
        alert="traffic_stall", subject="job", host="*", severity="warning", since=min(f.since for f in down),
        summary=f"traffic down on {len(down)} of {judged} NICs at once ({len(stopped)} stopped): "
                f"the whole job paused or hangs (checkpoint, evaluation, collective hang)",
        evidence={"nics_down": len(down), "nics_judged": judged, "nics_stopped": len(stopped),
                  "examples": sorted(f.subject for f in down)[:8]})
