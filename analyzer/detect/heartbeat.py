"""Heartbeat loss: a host of the job that has been silent for the miss threshold.

Silence is measured on the job's event-time clock (`at`), never the wall clock, so a
replay or a fast simulation that ends does not declare every host lost. Threshold =
`heartbeat.miss_intervals` x the host's own heartbeat interval; the finding's `since` is
the instant the silence crossed it.

Silence is judged against what has been ingested for *that host*: live, a host whose
heartbeats still arrive but are not yet stored up to `at` (its partition lags, its agent
replays a spool) is late, not lost — it is neither paged nor resolved until its own
clock gets there. A host is lost when its own heartbeats stopped while the job's clock
went on: either they are stored past the gap, or nothing of it arrives at all any more
(the engine's idle rule, on the ingest frontier). So late delivery, however out of order,
pages nobody, and live raises what replay raises.

Members: every host that heartbeated for the job; after a restart (a later run, see
epoch.py), only those heard from since the run began — a host the restart left out is
no longer the job's. When every member of a multi-host job is silent at once the job
itself stopped (it ended, it is being restarted, or its telemetry path is down): no host
is paged for it, and a host already lost stays so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from vigil.analyzer.detect.base import AT, EPOCH, EvalContext, Finding, as_utc
from vigil.analyzer.settings import HeartbeatSettings

LOOKBACK_S = 600.0

_SQL = f"""
SELECT p.host AS host, p.first_seen AS first_ts, p.base_iv AS base_interval,
       h.last_ts AS last_ts, h.iv AS interval_s
FROM (SELECT host, min(first_ts) AS first_seen, max(interval_s) AS base_iv
      FROM host_presence WHERE job_id = {{job:String}} GROUP BY host) AS p
LEFT JOIN (SELECT host, max(ts) AS last_ts, max(interval_s) AS iv
           FROM heartbeats WHERE job_id = {{job:String}} AND ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT}
           GROUP BY host) AS h ON p.host = h.host
WHERE p.first_seen <= {AT}
"""


class HeartbeatDetector:
    name = "heartbeat_loss"

    def detect(self, ctx: EvalContext) -> list[Finding]:
        rows = ctx.rows(_SQL, lo=ctx.ago(LOOKBACK_S))
        run_start = ctx.epoch.start if ctx.epoch is not None and ctx.epoch.index > 0 else None
        return judge(rows, ctx.settings.heartbeat, ctx.at, caught_up=lambda h: ctx.caught_up(h, "heartbeat"),
                     firing={s.split(":", 1)[1] for s in ctx.firing if s.startswith("heartbeat_loss:")},
                     run_start=run_start)


def judge(rows: Sequence[Mapping[str, Any]], s: HeartbeatSettings, at: datetime, *,
          caught_up: Callable[[str], bool] = lambda _h: True, firing: set[str] | frozenset[str] = frozenset(),
          run_start: datetime | None = None) -> list[Finding]:
    """Findings from {host, first_ts, base_interval, last_ts (newest heartbeat <= at), interval_s}.

    `caught_up(host)`: its heartbeats are known up to `at` (late hosts keep their state);
    `run_start`: a restarted run's start (hosts silent since before it are not members).
    """
    out = []
    members = 0
    for r in rows:
        host = str(r["host"])
        last = as_utc(r["last_ts"]) if r["last_ts"] is not None else EPOCH
        if last <= EPOCH:
            last = at - timedelta(seconds=LOOKBACK_S)
        if run_start is not None and last < run_start:
            continue  # not part of the restarted run
        members += 1
        if not caught_up(host) and host not in firing:
            continue  # late, not lost (a firing alert stays as it is)
        interval = float(r["interval_s"] or 0) or float(r["base_interval"] or 0) or 2.0
        threshold = s.miss_intervals * interval
        silent = (at - last).total_seconds()
        if silent < threshold and caught_up(host):
            continue
        out.append(Finding(
            alert="heartbeat_loss", subject=host, host=host, severity="critical",
            since=last + timedelta(seconds=threshold),
            summary=f"{host}: no heartbeat for {silent:.0f} s (interval {interval:g} s)",
            evidence={"host": host, "last_heartbeat": last.isoformat(), "silent_s": round(silent, 1),
                      "interval_s": interval, "threshold_s": threshold},
        ))
    if members > 1 and len(out) == members:  # every host at once: the job stopped, not a host's loss
        return [f for f in out if f.subject in firing]
    return out
