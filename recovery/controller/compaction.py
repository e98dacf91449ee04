"""Forgetting: what the controller's fold may drop, so its state stays bounded over any log.

The state (`state.ClusterState`) is a fold of every retained event. Left alone it would keep
every finished recovery, incident, alert, command and acknowledgement for the log's whole
retention. `forget()` drops what no open recovery and no future decision can need:

* a finished recovery (outcome or skipped plan) older than `keep` (1 day by default) that is
  not among its job's latest `keep_cases` (16) — the latest stay, whatever their age, for the
  crash-loop count, escalation and `vigil recovery status` — with its commands, their
  acknowledgements and check results, and the trigger ids merged into it;
* incidents and alert episodes older than `keep`: the controller takes no trigger older than
  `policy.max_trigger_age_s` (15 min), so they can never open a recovery again;
* its own cordons older than `keep` (the circuit breaker counts the last hour), done operator
  requests (their ids stay, `executed`, for `keep_request_ids`: the topic's retention, 7 days, so a
  signed request re-published while the log still holds it is never pending again, whatever the
  request expiry), acknowledgements and results of commands it no longer holds;
* a whole job none of whose agents spoke within `keep` and with no open recovery (it is over,
  or its agents are gone); if they come back, it is a job seen for the first time.

"Older" is measured in log time: the newest event time folded (never past the folding clock),
so a rebuild of a week of log forgets as it goes and ends with what a live controller holds.
A forgotten recovery leaves a tombstone (its id and last time, the newest `TOMBSTONES`): late
copies of its events (another partition's, a re-delivery) are not folded into a new, open-looking
case; a later recovery that reuses the id (a job's `start/g1` after the job was forgotten) is.
Member keep-alives never accumulate (one member per host, see `state`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vigil.recovery.controller.state import Case, ClusterState

TOMBSTONES = 100_000  # forgotten recovery ids remembered (~10 MB at most)
SEEN = 200_000  # event ids remembered for de-duplication; beyond it a duplicate is folded again, idempotently
EXECUTED = 100_000  # executed request ids remembered (~10 MB at most), the oldest dropped first
COMPACT_EVERY = 10_000  # events folded between two passes of `forget`


@dataclass(frozen=True, kw_only=True)
class Retention:
    keep: timedelta = timedelta(days=1)
    keep_cases: int = 16  # a job's latest finished recoveries kept whatever their age
    keep_request_ids: timedelta = timedelta(days=7)  # executed request ids: the topic's retention (default)


def last_activity(case: Case) -> datetime | None:
    """The case's newest time the log gave it (plan, steps, approval, outcome)."""
    times = [t for t in (case.opened_at, case.approved_at, case.last_ts, case.outcome.ts if case.outcome else None)
             if t is not None]
    times += [t for s in case.steps.values() for t in (s.planned_at, s.started_at, s.ended_at) if t is not None]
    return max(times, default=None)


def forget(state: ClusterState, now: datetime, retention: Retention) -> int:
    """Drop from `state` what no open recovery can need (see the module docstring); how many cases went."""
    horizon = now - retention.keep
    gone = _cases(state, horizon, retention.keep_cases)
    gone += _jobs(state, horizon)
    state.incidents = {k: i for k, i in state.incidents.items() if i.detected >= horizon}
    state.alerts = {k: a for k, a in state.alerts.items() if a.ts >= horizon}
    state.alerts_horizon = max(state.alerts_horizon or horizon, horizon)
    state.cordons = {k: c for k, c in state.cordons.items() if c.ts >= horizon}
    done = {cid for cid, r in state.requests.items() if cid in state.requests_done and r.ts < horizon}
    state.executed.update({cid: state.requests[cid].ts for cid in done})
    state.requests = {cid: r for cid, r in state.requests.items() if cid not in done}
    state.requests_done -= done
    ids_horizon = now - max(retention.keep_request_ids, retention.keep)
    kept = sorted(((t, cid) for cid, t in state.executed.items() if t >= ids_horizon), reverse=True)[:EXECUTED]
    state.executed = {cid: t for t, cid in kept}
    state.acks = {k: a for k, a in state.acks.items() if k[0] in state.commands or a.ts >= horizon}
    state.checks = {k: c for k, c in state.checks.items() if k[0] in state.commands or c.ts >= horizon}
    return gone


def _cases(state: ClusterState, horizon: datetime, keep_cases: int) -> int:
    latest = {cid for job in state.jobs.values() for cid in job.cases[-keep_cases:]}
    old: dict[str, datetime] = {}
    for cid, case in state.cases.items():
        if case.open or cid in latest or not (case.skipped or case.outcome is not None):
            continue
        last = last_activity(case)
        if last is not None and last < horizon:
            old[cid] = last
    if not old:
        return 0
    _drop_cases(state, old)
    return len(old)


def _drop_cases(state: ClusterState, old: dict[str, datetime]) -> None:
    for cid, last in old.items():
        case = state.cases.pop(cid)
        state.tombstone(cid, last)
        job = state.jobs.get(case.job_id)
        if job is not None and cid in job.cases:
            job.cases.remove(cid)
    state.merged = {t: c for t, c in state.merged.items() if c not in old}
    state.commands = {k: c for k, c in state.commands.items() if not c.incident_id or c.incident_id not in old}


def _jobs(state: ClusterState, horizon: datetime) -> int:
    quiet = [j for j in state.jobs.values()
             if j.last_ts is not None and j.last_ts < horizon and all(m.ts < horizon for m in j.members.values())
             and not any(c.open for c in state.cases.values() if c.job_id == j.job_id)]
    if not quiet:
        return 0
    ids = {j.job_id for j in quiet}
    old = {cid: last_activity(c) or horizon for cid, c in state.cases.items() if c.job_id in ids}
    _drop_cases(state, old)
    for job_id in ids:
        del state.jobs[job_id]
    state.commands = {k: c for k, c in state.commands.items() if c.job_id not in ids}
    return len(old)
