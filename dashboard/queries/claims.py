"""Unverified claims: the decisions the analyzer's ingest stored flagged ``verified = 0``.

A decision that failed the signing gate (unsigned, or signed by a role that may not make it) is
never read as what happened: the pages' other queries read verified rows only. It is still
shown, marked, as a claim someone made: an operator sees the forgery instead of nothing. One
query over the alert events and the recovery actions and outcomes, newest first, bounded by
`limit`; `sources` picks which of them (`ALERTS`, `RECOVERY`), `job` '' means every job.
"""

from __future__ import annotations

from vigil.dashboard.store import Row, Store
from vigil.dashboard.tables import ALERT_EVENTS, RECOVERY_ACTIONS, RECOVERY_OUTCOMES

ALERTS = ("alert",)
RECOVERY = ("recovery action", "recovery outcome")

_JOB = "({job:String} = '' OR job_id = {job:String})"
_SQL = f"""
SELECT t_ms, source, job, what, detail, signed FROM (
  SELECT toUnixTimestamp64Milli(ts) AS t_ms, 'alert' AS source, toString(job_id) AS job,
         concat(toString(alert), ' ', subject, ' ', toString(status), ' (', toString(severity), ')') AS what,
         summary AS detail, signature != '' AS signed
  FROM {ALERT_EVENTS} WHERE verified = 0 AND {_JOB} AND has({{sources:Array(String)}}, 'alert')
  UNION ALL
  SELECT toUnixTimestamp64Milli(ts), 'recovery action', toString(job_id),
         concat(toString(action), ' ', target, ' ', toString(status)), reason, signature != ''
  FROM {RECOVERY_ACTIONS} WHERE verified = 0 AND {_JOB} AND has({{sources:Array(String)}}, 'recovery action')
  UNION ALL
  SELECT toUnixTimestamp64Milli(ts), 'recovery outcome', toString(job_id),
         concat('outcome ', toString(result), ' of ', incident_id), reason, signature != ''
  FROM {RECOVERY_OUTCOMES} WHERE verified = 0 AND {_JOB} AND has({{sources:Array(String)}}, 'recovery outcome')
) ORDER BY t_ms DESC LIMIT {{limit:UInt32}}
"""


def unverified(store: Store, sources: tuple[str, ...], job: str | None = None, limit: int = 50) -> list[Row]:
    """The newest unverified decisions of `sources` (of `job`): t_ms, source, job, what, detail, signed."""
    return store.rows("unverified claims", _SQL, {"sources": list(sources), "job": job or "", "limit": limit})
