"""Collective hangs: which rank(s) a stuck job waits for, from its ranks' Flight Recorder dumps.

The step timer's hang watchdog makes every stalled rank dump its Flight Recorder trace;
the dumps of one hang are those within `hang.episode_s` of the newest (each rank's latest).
Once every member has dumped, or `hang.gather_s` after the first dump, they are matched
across ranks (`incidents.match`): the ranks missing from the in-flight collective (or
out of step, or silent) are the culprits, those waiting on them the victims. A culprit
fires `collective_hang` (critical, subject `host/rankN` of the first culprit) naming the
operation, its process group and sequence number, where the culprit's training thread is,
and the victims; it holds until the job steps again after the dumps.

Without a Flight Recorder culprit (recording off, or every rank inside the open
collective), a job whose steps stopped for `hang.stall_s` while its hosts still report
live processes is a hang too, on weaker evidence: ranks whose steps stopped earlier are
named, else nobody (`error`, subject `job`). Live, that verdict waits (`NotYet`) until the
step topic's consumer has stored everything produced before the newest of those heartbeats
was ingested: a silence of the steps that are merely behind the heartbeats in a catch-up
(a heavy topic behind a light one) is not a hang. Its evidence says what it checked.

Cost: at each instant it reads one small row per dumped rank (host, time, step); the group
membership (deduplicated in ClickHouse: every member reports the same lists), the per-group
tails and the stacks are read and matched only for an episode not judged before (the detector
remembers the last `MEMO` episodes' results, keyed by their ranks and times), so a hang that
stays open costs a cheap query per evaluation, not a re-match of every rank.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from vigil.analyzer.detect.base import AT, RAW_WINDOW, EvalContext, Finding, NotYet, as_utc
from vigil.analyzer.incidents.flightrec import GroupTail, loads_tail, tail_of
from vigil.analyzer.incidents.match import Frontier, Verdict, match
from vigil.analyzer.incidents.roster import RankInfo, read_roster, world
from vigil.analyzer.settings import HangSettings

_TRACES_SQL = f"""
SELECT rank, argMax(host, ts) AS dump_host, max(ts) AS dumped, argMax(step, ts) AS last_step
FROM collective_traces
WHERE job_id = {{job:String}} AND ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT}
GROUP BY rank
"""

# the union of the groups the dumped ranks report (every member reports the same lists: deduplicated first)
_MEMBERS_SQL = f"""
SELECT name, arraySort(arrayDistinct(arrayFlatten(groupUniqArray(members)))) AS ranks FROM (
    SELECT rank, argMax(group_ranks, ts) AS groups FROM collective_traces
    WHERE job_id = {{job:String}} AND ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT} AND rank IN {{ranks:Array(UInt32)}}
    GROUP BY rank)
ARRAY JOIN mapKeys(groups) AS name, mapValues(groups) AS members
GROUP BY name
"""

_DUMPS_SQL = f"""
SELECT rank, argMax(pg_tail, ts) AS tail, argMax(stack, ts) AS last_stack
FROM collective_traces
WHERE job_id = {{job:String}} AND ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT} AND rank IN {{ranks:Array(UInt32)}}
GROUP BY rank
"""

# rows stored before `pg_tail` existed: their whole entries (reading `entries` costs ~100 KB a rank)
_ENTRIES_SQL = f"""
SELECT rank, argMax(entries, ts) AS raw_entries
FROM collective_traces
WHERE job_id = {{job:String}} AND ts > {{lo:DateTime64(3, 'UTC')}} AND ts <= {AT} AND rank IN {{ranks:Array(UInt32)}}
GROUP BY rank
"""

# the current run's (a restart from an older checkpoint steps below the previous run's top)
_LAST_STEP_SQL = f"""
SELECT maxOrNull(last_ts) AS last_ts FROM job_steps
WHERE job_id = {{job:String}} AND first_ts <= {AT} AND first_ts >= {{since:DateTime64(3, 'UTC')}}
  AND step + 100 >= (SELECT ifNull(max(step), 0) FROM job_steps WHERE job_id = {{job:String}} AND first_ts <= {AT}
                       AND first_ts >= {{since:DateTime64(3, 'UTC')}})
"""

ALIVE_SQL = f"""
SELECT host, argMax(procs_running, ts) AS procs, max(ingested_at) AS seen FROM heartbeats
WHERE job_id = {{job:String}} AND {RAW_WINDOW}
GROUP BY host HAVING procs > 0
"""

MEMO = 32
CHECKED = ("steps stored up to the instant; live processes in heartbeats; the step topic's consumer caught up to "
           "when those heartbeats were ingested (no step of the silence still in flight)")
"""What a weak-evidence stall verdict checked before it was raised (its evidence says so)."""


@dataclass(frozen=True, kw_only=True)
class Judged:
    """What one episode of dumps said: the Flight Recorder verdict's kind and its findings (if any)."""

    kind: str
    findings: list[Finding]


class HangDetector:
    name = "collective_hang"
    false_alarms_per_hour = 0.05  # no step for minutes while processes run, or Flight Recorder dumps
    cadence_s = 4.0  # a stall of `hang.stall_s` (minutes) or Flight Recorder dumps: every other instant

    def __init__(self) -> None:
        self._memo: OrderedDict[tuple[Any, ...], Judged] = OrderedDict()

    def detect(self, ctx: EvalContext) -> list[Finding]:
        s = ctx.settings.hang
        lo = ctx.ago_in_run(s.lookback_s)  # never a previous run's dumps (a restart renumbers the ranks)
        traces = ctx.rows(_TRACES_SQL, lo=lo) if ctx.stored("collective") else []
        last = ctx.rows(_LAST_STEP_SQL, since=ctx.run_start())
        last_step_ts = as_utc(last[0]["last_ts"]) if last and last[0]["last_ts"] is not None else None
        if not traces and (last_step_ts is None or (ctx.at - last_step_ts).total_seconds() < s.stall_s):
            return []
        roster = read_roster(ctx)
        fr_kind: str | None = None
        if traces:
            first, newest, episode = episode_of(traces, s)
            if last_step_ts is None or last_step_ts <= newest:  # else the job stepped since: that stall is over
                key = (ctx.job, first, newest, tuple(sorted(episode)))
                judged = self._memo.get(key)
                if judged is None:
                    judged = self._judge(ctx, lo, roster, episode, first, last_step_ts)
                    if judged is None:
                        return []  # the other ranks' dumps are still on their way
                    self._memo[key] = judged
                    while len(self._memo) > MEMO:
                        self._memo.popitem(last=False)
                if judged.findings:
                    return judged.findings
                fr_kind = judged.kind
        beats = ctx.rows(ALIVE_SQL, lo=ctx.ago(min(s.stall_s, 60.0)))
        found = judge_stall(fr_kind, roster, [str(r["host"]) for r in beats], last_step_ts, ctx.at, s)
        seen = max((as_utc(r["seen"]) for r in beats), default=None)
        if found and seen is not None and not ctx.stored_before("steps", seen):
            raise NotYet(f"collective_hang: steps produced before {seen.isoformat()} (when the heartbeats of live "
                         "processes were ingested) may be in flight")
        return found

    def _judge(self, ctx: EvalContext, lo: str, roster: Mapping[int, RankInfo], episode: Mapping[int, Mapping[str, Any]],
               first: datetime, last_step_ts: datetime | None) -> Judged | None:
        dumped = sorted(episode)
        reported = {str(r["name"]): [int(x) for x in r["ranks"]] for r in ctx.rows(_MEMBERS_SQL, lo=lo, ranks=dumped)}
        everyone = world(roster) | set(dumped) | {x for v in reported.values() for x in v}
        if set(dumped) < everyone and (ctx.at - first).total_seconds() < ctx.settings.hang.gather_s:
            return None
        dumps = {int(r["rank"]): dict(r) for r in ctx.rows(_DUMPS_SQL, lo=lo, ranks=dumped)}
        if old := sorted(r for r, row in dumps.items() if not row["tail"]):
            for r in ctx.rows(_ENTRIES_SQL, lo=lo, ranks=old):
                dumps[int(r["rank"])]["raw_entries"] = r["raw_entries"]
        return judge_dumps(episode, dumps, reported, everyone, roster, first, last_step_ts)


def episode_of(traces: Sequence[Mapping[str, Any]], s: HangSettings) -> tuple[datetime, datetime, dict[int, Mapping[str, Any]]]:
    """(first dump, newest dump, rank -> its row) of the newest hang: dumps within `episode_s` of the newest."""
    newest = max(as_utc(r["dumped"]) for r in traces)
    episode = {int(r["rank"]): r for r in traces if as_utc(r["dumped"]) >= newest - timedelta(seconds=s.episode_s)}
    return min(as_utc(r["dumped"]) for r in episode.values()), newest, episode


def parse_tails(row: Mapping[str, Any]) -> dict[str, GroupTail]:
    """A trace row's per-group tails (`pg_tail`, else computed from its entries; {} when unreadable)."""
    try:
        if row.get("tail"):
            return loads_tail(str(row["tail"]))
        return tail_of(json.loads(str(row.get("raw_entries") or "[]")))
    except (ValueError, KeyError, TypeError, IndexError):
        return {}


def judge_dumps(episode: Mapping[int, Mapping[str, Any]], dumps: Mapping[int, Mapping[str, Any]],
                reported: Mapping[str, list[int]], everyone: set[int], roster: Mapping[int, RankInfo],
                first: datetime, last_step_ts: datetime | None) -> Judged:
    """Match one episode's dumps across ranks; a finding when Flight Recorder names a culprit."""
    verdict = match({r: parse_tails(row) for r, row in dumps.items()}, reported, everyone)
    if not verdict.culprits:
        return Judged(kind=verdict.kind, findings=[])
    since = min(first, last_step_ts) if last_step_ts is not None else first
    rows = {r: {**episode[r], **dumps.get(r, {})} for r in episode}
    return Judged(kind=verdict.kind, findings=[_fr_finding(verdict, rows, roster, since, first, len(everyone))])


def _where(stack: str) -> str:
    """The innermost frame of a stack dump: its file/line and the code line."""
    lines = [ln.strip() for ln in stack.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-2:])[:300]


def _frontier_text(f: Frontier | None) -> str:
    return f"{f.op} {f.sizes} (group {f.group} {f.desc or ''} seq {f.seq})".replace("  ", " ") if f else ""


def _host(rank: int, rows: Mapping[int, Mapping[str, Any]], roster: Mapping[int, RankInfo]) -> str:
    if rank in rows:
        return str(rows[rank]["dump_host"])
    info = roster.get(rank)
    return info.host if info else "unknown"


def _fr_finding(v: Verdict, rows: Mapping[int, Mapping[str, Any]], roster: Mapping[int, RankInfo], since: datetime,
                first_dump: datetime, expected: int) -> Finding:
    culprits = []
    for r in v.culprits:
        row = rows.get(r)
        where = _where(str(row.get("last_stack") or "")) if row is not None else ""
        front = v.frontier_of(r)
        own = (f"not in {_frontier_text(front)}" if front else "out of step") + (f"; at {where}" if where else "")
        if row is None:
            own += "; sent no Flight Recorder dump"
        culprits.append({"rank": r, "host": _host(r, rows, roster), "step": row["last_step"] if row else None,
                         "message": own, "evidence": v.evidence.get(r, [])})
    victims = [{"rank": r, "host": _host(r, rows, roster), "message": f"waits in {_frontier_text(v.frontier_of(r))}",
                "step": rows[r]["last_step"] if r in rows else None} for r in v.victims]
    head = culprits[0]
    front = v.frontier_of(v.culprits[0])
    names = ", ".join(f"{c['host']} rank {c['rank']}" for c in culprits)
    strength = "" if v.strong else " (weak: no dump of its own)"
    summary = (f"collective hang: {names} never joined {_frontier_text(front) or 'the collective'}; "
               f"{len(victims)} ranks wait for it{strength}")
    return Finding(
        alert="collective_hang", subject=f"{head['host']}/rank{head['rank']}", host=str(head["host"]),
        severity="critical", since=since, summary=summary[:2048],
        evidence={"verdict": v.kind, "confidence": "strong" if v.strong else "weak", "culprits": culprits,
                  "victims": victims, "dumps": len(rows), "expected": expected, "first_dump": first_dump.isoformat(),
                  "frontiers": [{"group": f.group, "desc": f.desc, "seq": f.seq, "op": f.op, "sizes": f.sizes,
                                 "missing": f.missing, "no_dump": f.no_dump, "timeout_ms": f.timeout_ms}
                                for f in v.frontiers],
                  "wait_for": {str(k): w for k, w in v.wait_for.items()}})


def judge_stall(fr_kind: str | None, roster: Mapping[int, RankInfo], alive_hosts: Sequence[str],
                last_step_ts: datetime | None, at: datetime, s: HangSettings) -> list[Finding]:
    """No Flight Recorder culprit: a job whose steps stopped `stall_s` ago while its processes run."""
    if last_step_ts is None or (at - last_step_ts).total_seconds() < s.stall_s or not alive_hosts:
        return []
    top = max((r.last_step for r in roster.values() if r.last_step is not None), default=None)
    behind = sorted(r.rank for r in roster.values() if r.last_step is not None and top is not None
                    and r.last_step < top and r.host in alive_hosts)
    why = f"Flight Recorder: {fr_kind.replace('_', ' ')}" if fr_kind is not None else "no Flight Recorder dumps"
    stalled = round((at - last_step_ts).total_seconds())
    culprits = [{"rank": r, "host": roster[r].host, "step": roster[r].last_step,
                 "message": f"its steps stopped at {roster[r].last_step}, the others reached {top}"} for r in behind]
    victims = [{"rank": r.rank, "host": r.host, "step": r.last_step, "message": f"stopped at step {r.last_step}"}
               for r in roster.values() if r.rank not in behind and r.host in alive_hosts]
    if culprits:
        head = culprits[0]
        names = ", ".join(f"{c['host']} rank {c['rank']}" for c in culprits)
        summary = f"collective hang (weak evidence, {why}): no step for {stalled} s; {names} stopped first"
        subject, host, sev = f"{head['host']}/rank{head['rank']}", str(head["host"]), "critical"
    else:
        summary = f"job hangs (weak evidence, {why}): no step for {stalled} s while its processes run; culprit unknown"
        subject, host, sev = "job", alive_hosts[0], "error"
    return [Finding(alert="collective_hang", subject=subject, host=host, severity=sev,  # type: ignore[arg-type]
                    since=last_step_ts, summary=summary[:2048],
                    evidence={"verdict": "stall", "confidence": "weak", "culprits": culprits, "victims": victims,
                              "stalled_s": stalled, "flight_recorder": fr_kind or "none", "checked": CHECKED})]
