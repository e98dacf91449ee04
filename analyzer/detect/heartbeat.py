"""Heartbeat loss: a host that reported before and has been silent for the miss threshold.

Silence is measured on the job's event-time clock (`at`), never the wall clock, so a
replay or a fast simulation that ends does not declare every host lost. Threshold =
`heartbeat.miss_intervals` x the host's own heartbeat interval. Live, a host is also
required to have had nothing ingested for `heartbeat.quiet_s` of wall clock, so a
host whose partition merely lags behind the others is not taken for dead. The
finding's `since` is the instant the silence crossed the threshold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from vigil.analyzer.detect.base import AT, EPOCH, EvalContext, Finding, as_utc
from vigil.analyzer.settings import HeartbeatSettings

LOOKBACK_S = 600.0

_SQL = f"""
SELECT p.host AS host, p.first_seen AS first_ts, p.base_iv AS base_interval,
       h.last_ts AS last_ts, h.iv AS interval_s, h.last_ingested AS last_ingested
FROM (SELECT host, min(first_ts) AS first_seen, max(interval_s) AS base_iv
      FROM host_presence WHERE job_id = {{job:String}} GROUP BY host) AS p
LEFT JOIN (SELECT host, max(ts) AS last_ts, max(interval_s) AS iv, max(ingested_at) AS last_ingested
           FROM heartbeats WHERE job_id = {{job:String}} AND ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT}
           GROUP BY host) AS h ON p.host = h.host
WHERE p.first_seen <= {AT}
"""


class HeartbeatDetector:
    name = "heartbeat_loss"

    def detect(self, ctx: EvalContext) -> list[Finding]:
        rows = ctx.rows(_SQL, lo=ctx.ago(LOOKBACK_S))
        wall = datetime.now(tz=ctx.at.tzinfo) if ctx.live else None
        return judge(rows, ctx.settings.heartbeat, ctx.at, wall)


def judge(rows: Sequence[Mapping[str, Any]], s: HeartbeatSettings, at: datetime,
          wall_now: datetime | None = None) -> list[Finding]:
    out = []
    for r in rows:
        host = str(r["host"])
        last = as_utc(r["last_ts"]) if r["last_ts"] is not None else EPOCH
        interval = float(r["interval_s"] or 0) or float(r["base_interval"] or 0) or 2.0
        threshold = s.miss_intervals * interval
        if last <= EPOCH:
            last = at - timedelta(seconds=LOOKBACK_S)
        silent = (at - last).total_seconds()
        if silent < threshold:
            continue
        if wall_now is not None and r["last_ingested"] is not None:
            ingested = as_utc(r["last_ingested"])
            if ingested > EPOCH and (wall_now - ingested).total_seconds() < s.quiet_s:
                continue
        out.append(Finding(
            alert="heartbeat_loss", subject=host, host=host, severity="critical",
            since=last + timedelta(seconds=threshold),
            summary=f"{host}: no heartbeat for {silent:.0f} s (interval {interval:g} s)",
            evidence={"host": host, "last_heartbeat": last.isoformat(), "silent_s": round(silent, 1),
                      "interval_s": interval, "threshold_s": threshold},
        ))
    return out
