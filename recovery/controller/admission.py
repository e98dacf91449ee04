"""Which operator requests the controller carries out: server-side target checks and a rate limit per identity.

An operator request (the dashboard's cordon / uncordon / evict) is signed by the operator key, but
the key proves only that an operator tool made it, not that its target is sane. Before executing
one, the leading controller checks, on its own state, never on what the request claims:

* it is fresh: within its signed bound (`vigil.signing.freshness`: a request is valid for the state's
  retention, `compaction.Retention.keep`, 1 day, after it was signed) and not older than that retention, so a
  signed request re-published after compaction forgot that it was done is refused, never executed
  twice (`RequestRefusal.EXPIRED`); done ids are kept longer still, for the topic's retention
  (`compaction.Retention.keep_request_ids`), so a copy is never pending again while the log holds it;
* the job exists: some agent of it announced itself (`member`) to this controller
  (`RequestRefusal.UNKNOWN_JOB`);
* the host belongs to the job: it is one of the job's members (`RequestRefusal.FOREIGN_HOST`);
* the identity (the request's `actor`: ``dashboard:<user>`` from the reverse proxy's header, or
  the name typed in) has a token left in its bucket: `requests_per_minute` refilled continuously,
  at most `requests_burst` at once (`RequestRefusal.RATE_LIMITED`).

A refused request is recorded as its result (`requests.refuse`: `skipped`, `details.refused` =
the reason), so it is an event, is never retried, and a restarted controller does not execute it.
Pure logic; buckets live in memory (at most `MAX_IDENTITIES`, the least recently used dropped),
so a restarted controller starts with full buckets.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from vigil.contract import RecoveryAction
from vigil.recovery.controller.state import ClusterState
from vigil.signing.freshness import expired

MAX_IDENTITIES = 4096


class RequestRefusal(StrEnum):
    EXPIRED = "expired"  # older than the state's retention: done or not, it is not executed now
    UNKNOWN_JOB = "unknown_job"  # no agent of the job announced itself to the controller
    FOREIGN_HOST = "host_not_in_job"  # the host is not one of the job's members
    RATE_LIMITED = "rate_limited"  # the identity asked more often than its bucket allows


@dataclass
class _Bucket:
    tokens: float
    at: datetime


@dataclass(kw_only=True)
class Admission:
    per_minute: float
    burst: int
    _buckets: OrderedDict[str, _Bucket] = field(default_factory=OrderedDict, repr=False)

    def check(self, req: RecoveryAction, state: ClusterState, now: datetime) -> RequestRefusal | None:
        """None when `req` may be executed now (and a token of its identity is spent)."""
        if req.ts < now - state.retention.keep or expired(req, now):
            return RequestRefusal.EXPIRED
        job = state.jobs.get(req.job_id)
        if job is None or not job.members:
            return RequestRefusal.UNKNOWN_JOB
        if req.target not in job.members:
            return RequestRefusal.FOREIGN_HOST
        return None if self._take(req.actor, now) else RequestRefusal.RATE_LIMITED

    def _take(self, identity: str, now: datetime) -> bool:
        bucket = self._buckets.pop(identity, None) or _Bucket(tokens=float(self.burst), at=now)
        elapsed = max(0.0, (now - bucket.at).total_seconds())
        bucket.tokens = min(float(self.burst), bucket.tokens + elapsed * self.per_minute / 60.0)
        bucket.at = now
        self._buckets[identity] = bucket
        while len(self._buckets) > MAX_IDENTITIES:
            self._buckets.popitem(last=False)
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True
