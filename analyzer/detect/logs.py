"""Error logs and process exits: classified error lines and non-zero exits become alerts.

Log lines of severity >= `log.min_severity` aggregate per (host, category) into one
incident: its alert names the ranks, the line count (flood summaries counted by
their `repeats`) and the latest message; it resolves once the host has been quiet in
that category for `log.resolve_s`. A process that exits non-zero or by a signal
raises a critical alert per (host, rank) that resolves when that rank reports a
training step again (restart); its evidence carries the rank's own message and when it
was printed (`failed_at`), from which incidents order a cascade. The launcher's own exit
(torchrun: not a rank) alerts (`host/launcher`) only when none of its ranks did. Exits
while the recovery controller pauses or halts the job (`recovery_actions`, verified rows only: from a pause's
`started` to its end, plus `PAUSE_GRACE_S`) are its own doing, not failures: no alert, so
no crash cascade either; so are the error lines its stopped ranks print in those windows
(SIGTERM tracebacks, peers' connection errors), except hardware lines (Xid, ECC, NVLink),
which are facts about the host whoever stopped the job.

Where a line came from decides what it may do (issue 49): lines the agent read from the hardware's own
reports (`source` kernel, nvml, sysfs) carry the Xid catalog's action, which the alert quotes (`evidence`
source, action, gpus, and `host_fault` when the action takes the GPU or host out); a hardware line a training
process printed (`source` process: Xid, ECC, NVLink) is a claim about itself, its own alert (`<host>/<category>/
claim`) at most a warning, never a host fault.

What the hardware reported alerts from `log.hardware_min_severity` (warning), below the `log.min_severity`
(error) of everything else: an InfiniBand port's symbol errors growing, a corrected ECC or AER error are warnings
(the agent rate-limits them), each its own alert (`<host>/ib_symbol_errors`, `<host>/ecc`) that starts no recovery
(the catalog's `watch`) and pages only where a route takes warnings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from vigil.analyzer.detect.base import AT, EvalContext, Finding, Severity, as_utc, ch_time
from vigil.analyzer.incidents.errors import HARDWARE_CATEGORIES
from vigil.analyzer.settings import LogSettings
from vigil.contract.severity import SEVERITIES, of_rank, rank, sql_rank
from vigil.contract.xid import ATTESTED_SOURCES, HOST_ACTIONS, XidAction

EXIT_LOOKBACK_S = 86400.0
PAUSE_GRACE_S = 30.0  # after a pause ends, its stopped ranks' exits may still be arriving
PAUSE_MAX_S = 600.0  # a pause with no end recorded (the controller died) covers at most this

_LOG_SQL = f"""
SELECT host, category, max(greatest(1, {sql_rank('severity')})) AS level,
       count() AS lines, sum(repeats) AS total, min(ts) AS first_ts, max(ts) AS last_ts,
       arraySort(groupUniqArray(64)(rank)) AS ranks, argMax(message, ts) AS message,
       arraySort(groupUniqArray(8)(xid)) AS xids, source = 'process' AND category IN {{hardware:Array(String)}} AS claim,
       argMax(source, ts) AS src, groupUniqArray(8)(action) AS actions, arraySort(groupUniqArray(16)(gpu_index)) AS gpus
FROM log_lines
WHERE job_id = {{job:String}} AND ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT}
  AND (severity IN {{severities:Array(String)}}
       OR (source IN {{attested:Array(String)}} AND severity IN {{hardware_severities:Array(String)}}))
  AND (category IN {{always:Array(String)}} OR NOT arrayExists((a, b) -> ts >= a AND ts <= b,
       {{paused_from:Array(DateTime64(3, 'UTC'))}}, {{paused_to:Array(DateTime64(3, 'UTC'))}}))
GROUP BY host, category, claim
"""

_EXIT_SQL = f"""
SELECT host, multiIf(launcher = 1, 'launcher', rank IS NOT NULL, toString(rank), concat('pid', toString(pid))) AS who,
       rank, argMax(exit_code, ts) AS code, argMax(signal, ts) AS sig, argMax(summary, ts) AS last_summary,
       argMax(failed_at, ts) AS failed, argMax(local_rank, ts) AS local, max(launcher) AS is_launcher,
       max(ts) AS exit_ts
FROM process_exits
WHERE job_id = {{job:String}} AND ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT}
  AND (ifNull(exit_code, 0) != 0 OR signal != '')
GROUP BY host, who, rank
"""

_PAUSES_SQL = f"""
SELECT ts, status FROM recovery_actions
WHERE job_id = {{job:String}} AND action IN ('pause', 'halt') AND target = {{job:String}} AND verified = 1
  AND status IN ('started', 'succeeded', 'failed') AND ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT}
ORDER BY ts
"""

_RESTARTED_SQL = f"""
SELECT host, rank, max(ts) AS last_step_ts FROM step_timings
WHERE job_id = {{job:String}} AND step >= {{from_step:UInt64}} AND ts > {{since:DateTime64(3, 'UTC')}}
  AND ts <= {AT} AND rank IN {{ranks:Array(UInt32)}}
GROUP BY host, rank
"""

_STEP_AT_SQL = """
SELECT ifNull(min(step), 0) AS step FROM
  (SELECT step FROM job_steps WHERE job_id = {job:String} GROUP BY step
   HAVING max(last_ts) >= {since:DateTime64(3, 'UTC')})
"""


class LogDetector:
    name = "error_log"
    false_alarms_per_hour = 0.0  # a fact (an Xid / ECC / NVLink line, a traceback): none in a healthy job

    def detect(self, ctx: EvalContext) -> list[Finding]:
        s = ctx.settings.log
        sev = [k for k in SEVERITIES if rank(k) >= rank(s.min_severity)]
        hardware_sev = [k for k in SEVERITIES if rank(k) >= rank(s.hardware_min_severity)]
        params: dict[str, Any] = {"lo": ctx.ago(s.resolve_s), "severities": sev, "always": [],
                                  "attested": sorted(ATTESTED_SOURCES), "hardware_severities": hardware_sev,
                                  "hardware": sorted(HARDWARE_CATEGORIES),
                                  "paused_from": [], "paused_to": []}
        rows = ctx.rows(_LOG_SQL, **params) if ctx.stored("log") else []
        if not rows:
            return []
        windows = pauses_since(ctx, min(as_utc(r["first_ts"]) for r in rows))
        if windows:  # what the stopped ranks print (SIGTERM tracebacks, peers' connection errors) is no failure
            rows = ctx.rows(_LOG_SQL, **{**params, "always": sorted(HARDWARE_CATEGORIES),
                                         "paused_from": [ch_time(a) for a, _ in windows],
                                         "paused_to": [ch_time(b) for _, b in windows]})
        return judge_logs(rows, s)


class ExitDetector:
    name = "process_exit"
    false_alarms_per_hour = 0.0  # a fact (a rank exited non-zero): none in a healthy job

    def detect(self, ctx: EvalContext) -> list[Finding]:
        exits = ctx.rows(_EXIT_SQL, lo=ctx.ago(EXIT_LOOKBACK_S)) if ctx.stored("exit") else []
        if not exits:
            return []
        ranked = [r for r in exits if r["rank"] is not None]
        restarted: list[dict[str, Any]] = []
        if ranked:
            since = min(as_utc(r["exit_ts"]) for r in ranked)
            from_step = int(ctx.rows(_STEP_AT_SQL, since=ch_time(since))[0]["step"])
            restarted = ctx.rows(_RESTARTED_SQL, since=ch_time(since), from_step=max(0, from_step - 1),
                                 ranks=sorted({int(r["rank"]) for r in ranked}))
        return judge_exits(exits, restarted, pauses_since(ctx, min(as_utc(r["exit_ts"]) for r in exits)))


def pauses_since(ctx: EvalContext, first: datetime) -> list[tuple[datetime, datetime]]:
    """The controller's pause windows that could cover something stamped at or after `first`."""
    return paused_windows(ctx.rows(_PAUSES_SQL, lo=ch_time(first - timedelta(seconds=PAUSE_MAX_S))))


def paused_windows(rows: Sequence[Mapping[str, Any]]) -> list[tuple[datetime, datetime]]:
    """[(from, until)] the controller was stopping the job: each `started` to the next end, plus the grace."""
    out: list[tuple[datetime, datetime]] = []
    began: datetime | None = None
    for r in rows:
        ts = as_utc(r["ts"])
        if r["status"] == "started":
            began = began or ts
        elif began is not None:
            out.append((began, ts + timedelta(seconds=PAUSE_GRACE_S)))
            began = None
    if began is not None:
        out.append((began, began + timedelta(seconds=PAUSE_MAX_S)))
    return out


ACTION_ORDER = (XidAction.REBOOT_THEN_CHECK, XidAction.CORDON, XidAction.INVESTIGATE, XidAction.RESET_GPU,
                XidAction.RESTART_JOB, XidAction.WATCH)
"""The strongest first: the action an alert of several lines quotes."""


def strongest_action(actions: Sequence[str]) -> XidAction | None:
    known = [a for a in ACTION_ORDER if a.value in actions]
    return known[0] if known else None


def judge_logs(rows: Sequence[Mapping[str, Any]], s: LogSettings) -> list[Finding]:
    out = []
    for r in rows:
        host, category = str(r["host"]), str(r["category"])
        claim = bool(r.get("claim"))
        level = min(int(r["level"]), 1) if claim else int(r["level"])  # a process's hardware claim: a warning
        severity: Severity = of_rank(max(level, 1))  # a matched line is at least a warning
        ranks = [int(x) for x in r["ranks"]]
        count = int(r["total"])
        rank_txt = f" ranks {','.join(map(str, ranks))}" if ranks else ""
        source = "process" if claim else str(r.get("src") or "process")
        action = strongest_action([str(a) for a in r.get("actions", [])]) if source in ATTESTED_SOURCES else None
        said = (f" [source {source}, catalog action {action.value}]" if action is not None else
                " [a claim the training process printed, not a kernel fact]" if claim else "")
        out.append(Finding(
            alert="error_log", subject=f"{host}/{category}{'/claim' if claim else ''}", host=host, severity=severity,
            since=as_utc(r["first_ts"]),
            summary=f"{host}{rank_txt} {category}{said}: {str(r['message'])[:300]} ({count} lines)",
            evidence={"host": host, "category": category, "ranks": ranks, "lines": count,
                      "xids": [int(x) for x in r["xids"]], "message": str(r["message"])[:2000],
                      "first_line": as_utc(r["first_ts"]).isoformat(), "last_line": as_utc(r["last_ts"]).isoformat(),
                      "source": source, "action": action.value if action is not None else None,
                      "gpus": [int(x) for x in r.get("gpus", []) if x is not None],
                      "host_fault": action in HOST_ACTIONS},
        ))
    return out


def judge_exits(exits: Sequence[Mapping[str, Any]], restarted: Sequence[Mapping[str, Any]],
                paused: Sequence[tuple[datetime, datetime]] = ()) -> list[Finding]:
    back: dict[tuple[str, int], datetime] = {(str(r["host"]), int(r["rank"])): as_utc(r["last_step_ts"])
                                             for r in restarted}
    out = []
    for r in exits:
        host, exit_ts = str(r["host"]), as_utc(r["exit_ts"])
        if any(lo <= exit_ts <= hi for lo, hi in paused):
            continue  # stopped by the recovery controller
        if r["rank"] is not None and back.get((host, int(r["rank"])), exit_ts) > exit_ts:
            continue  # the rank trains again
        launcher = bool(r.get("is_launcher"))
        how = f"signal {r['sig']}" if r["sig"] else f"exit code {r['code']}"
        who = "launcher" if launcher else f"rank {r['rank']}" if r["rank"] is not None else str(r["who"])
        failed_at = as_utc(r["failed"]) if r.get("failed") is not None else None
        out.append(Finding(
            alert="process_exit", subject=f"{host}/{who.replace(' ', '')}", host=host, severity="critical",
            since=exit_ts, summary=f"{host} {who} exited with {how}: {str(r['last_summary'])[:300]}",
            evidence={"host": host, "rank": r["rank"], "local_rank": r.get("local"), "exit_code": r["code"],
                      "signal": r["sig"] or None, "summary": str(r["last_summary"])[:2000],
                      "exit_ts": exit_ts.isoformat(), "failed_at": failed_at.isoformat() if failed_at else None,
                      "launcher": launcher},
        ))
    ranked_hosts = {f.host for f in out if not f.evidence["launcher"] and f.evidence["rank"] is not None}
    return [f for f in out if not (f.evidence["launcher"] and f.host in ranked_hosts)]
