"""Heartbeat loss: a host of the job whose heartbeats stopped while the job's other hosts went on.

Silence is measured on the job's event-time clock (`at`), never the wall clock: a host is
silent once its newest heartbeat is `heartbeat.miss_intervals` x its own interval old; the
finding's `since` is the instant the silence crossed that threshold. It is a *loss* only
while the job's others advance: some other host heartbeated at least twice within its own
last threshold (it beats steadily now). So a job that ends, pauses or is restarted —
every host falling silent within one interval of the others, then the whole job coming
back within one interval — pages no host, whichever host happened to beat last, live or
in replay; a host lost before the job stopped stays lost. A job with one host has no
others: its silence is the job's (an idle job, its exits).

Silence is judged against what has been ingested for *that host*: live, a host whose
heartbeats still arrive but are not yet stored up to `at` (its partition lags, its agent
replays a spool) is late, not lost — neither paged nor resolved until its own clock gets
there — and late hosts are no evidence that the job advances. A host whose agent sends
nothing at all goes idle (the engine's rule, on the ingest frontier) and is judged on
what is stored. So late delivery, however out of order, pages nobody, and live raises
what replay raises.

Members: every host that heartbeated for the job; after a restart (a later run, see
epoch.py), only those heard from since the run began — a host the restart left out is
no longer the job's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from vigil.analyzer.detect.base import AT, EPOCH, RAW_WINDOW, EvalContext, Finding, as_utc
from vigil.analyzer.settings import HeartbeatSettings

LOOKBACK_S = 600.0

SQL = f"""
SELECT p.host AS host, p.first_seen AS first_ts, p.base_iv AS base_interval,
       h.last_ts AS last_ts, h.iv AS interval_s, h.recent AS recent, h.n_run AS n_run, h.running AS running
FROM (SELECT host, min(first_ts) AS first_seen, max(interval_s) AS base_iv
      FROM host_presence WHERE job_id = {{job:String}} GROUP BY host) AS p
LEFT JOIN (SELECT host, max(ts) AS last_ts, max(interval_s) AS iv,
                  countIf(dateDiff('millisecond', ts, {AT}) < {{miss:Float64}} * interval_s * 1000) AS recent,
                  countIf(ts > {{run_lo:DateTime64(3, 'UTC')}}) AS n_run,
                  argMaxIf(procs_running, ts, ts > {{run_lo:DateTime64(3, 'UTC')}}) AS running
           FROM heartbeats WHERE job_id = {{job:String}} AND {RAW_WINDOW}
           GROUP BY host) AS h ON p.host = h.host
WHERE p.first_seen <= {AT}
"""


def host_beats(ctx: EvalContext) -> list[dict[str, Any]]:
    """Per host of the job: first seen, newest heartbeat, its interval, its heartbeats within its last threshold, and
    its training processes running as of its newest heartbeat within `traffic.stall_s` (`n_run` 0: none that recent).
    Asked once per instant (the heartbeat and traffic detectors share it)."""
    if "host_beats" not in ctx.memo:
        ctx.memo["host_beats"] = ctx.rows(SQL, lo=ctx.ago(LOOKBACK_S), miss=ctx.settings.heartbeat.miss_intervals,
                                          run_lo=ctx.ago(ctx.settings.traffic.stall_s))
    return ctx.memo["host_beats"]  # type: ignore[no-any-return]


def running_procs(ctx: EvalContext) -> dict[str, int]:
    """Each host's training processes running, as of its newest heartbeat within `traffic.stall_s`."""
    return {str(r["host"]): int(r["running"]) for r in host_beats(ctx) if int(r["n_run"] or 0) > 0}


class HeartbeatDetector:
    name = "heartbeat_loss"
    false_alarms_per_hour = 0.05  # a real silence of 3 intervals; only a late delivery could fake one
    cadence_s = 4.0  # a silence of 3 intervals (6 s at 2 s): judged every other instant, paged within ~10 s

    def detect(self, ctx: EvalContext) -> list[Finding]:
        rows = host_beats(ctx)
        run_start = ctx.epoch.start if ctx.epoch is not None and ctx.epoch.index > 0 else None
        return judge(rows, ctx.settings.heartbeat, ctx.at, caught_up=lambda h: ctx.caught_up(h, "heartbeat"),
                     firing={s.split(":", 1)[1] for s in ctx.firing if s.startswith("heartbeat_loss:")},
                     run_start=run_start)


def judge(rows: Sequence[Mapping[str, Any]], s: HeartbeatSettings, at: datetime, *,
          caught_up: Callable[[str], bool] = lambda _h: True, firing: set[str] | frozenset[str] = frozenset(),
          run_start: datetime | None = None) -> list[Finding]:
    """Findings from {host, first_ts, base_interval, last_ts (newest heartbeat <= at), interval_s, recent (its
    heartbeats within its last threshold)}.

    `caught_up(host)`: its heartbeats are known up to `at` (late hosts keep their state);
    `run_start`: a restarted run's start (hosts silent since before it are not members).
    """
    members = []
    for r in rows:
        last = as_utc(r["last_ts"]) if r["last_ts"] is not None else EPOCH
        last = last if last > EPOCH else at - timedelta(seconds=LOOKBACK_S)
        if run_start is None or last >= run_start:
            members.append((str(r["host"]), r, last))
    steady = {h for h, r, _ in members if int(r.get("recent") or 0) >= 2 and caught_up(h)}
    out = []
    for host, r, last in members:
        late = not caught_up(host)
        if late and host not in firing:
            continue  # late, not lost (a firing alert stays as it is)
        interval = float(r["interval_s"] or 0) or float(r["base_interval"] or 0) or 2.0
        threshold = s.miss_intervals * interval
        silent = (at - last).total_seconds()
        if not late and (silent < threshold or (host not in firing and not steady - {host})):
            continue  # beating, or the whole job fell silent (stopped, restarting): not this host's loss
        out.append(Finding(
            alert="heartbeat_loss", subject=host, host=host, severity="critical",
            since=last + timedelta(seconds=threshold),
            summary=f"{host}: no heartbeat for {silent:.0f} s (interval {interval:g} s)",
            evidence={"host": host, "last_heartbeat": last.isoformat(), "silent_s": round(silent, 1),
                      "interval_s": interval, "threshold_s": threshold},
        ))
    return out
