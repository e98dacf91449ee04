"""Notifications: the notifier's delivery log (the latest revision of each notification) and its silences.

Times here are wall-clock (when the notifier decided and delivered), not a job's event time:
the range selects notifications decided within `range_s` of now. `summary` is also what
`vigil notify status` prints.
"""

from __future__ import annotations

from vigil.dashboard.store import Row, Store
from vigil.dashboard.tables import NOTIFY_DELIVERIES, NOTIFY_SILENCES

_WHERE = """({job:String} = '' OR job_id = {job:String})
  AND ({receiver:String} = '' OR receiver = {receiver:String})
  AND ({range_s:UInt32} = 0 OR created >= now64(3) - toIntervalSecond({range_s:UInt32}))"""

_DELIVERIES_SQL = f"""
SELECT key, receiver, receiver_kind, group_key, seq, job_id, status, reason, severity, title, state, attempts,
       http_status, error, latency_ms, toUnixTimestamp64Milli(created) AS created_ms,
       toUnixTimestamp64Milli(updated) AS updated_ms
FROM {NOTIFY_DELIVERIES} FINAL
WHERE {_WHERE}
ORDER BY created DESC, key
LIMIT {{limit:UInt32}}
"""

_SUMMARY_SQL = f"""
SELECT receiver, any(receiver_kind) AS kind,
       countIf(state = 'pending') AS pending, countIf(state = 'delivered') AS delivered,
       countIf(state = 'failed') AS failed, countIf(state IN ('expired', 'dropped')) AS lost,
       sum(attempts) AS attempts, quantileIf(0.5)(latency_ms, state = 'delivered') AS p50_latency_ms,
       maxIf(toUnixTimestamp64Milli(updated), state = 'delivered') AS last_delivered_ms,
       minIf(toUnixTimestamp64Milli(created), state = 'pending') AS oldest_pending_ms,
       argMaxIf(error, updated, error != '') AS last_error
FROM {NOTIFY_DELIVERIES} FINAL
WHERE {_WHERE}
GROUP BY receiver ORDER BY receiver
"""

_SILENCES_SQL = f"""
SELECT silence_id, matchers, toUnixTimestamp64Milli(starts_at) AS starts_ms, toUnixTimestamp64Milli(ends_at) AS ends_ms,
       created_by, reason,
       multiIf(status = 'expired' OR ends_at <= now64(3), 'expired', starts_at > now64(3), 'pending', 'active') AS state
FROM {NOTIFY_SILENCES} FINAL
WHERE {{all:UInt8}} = 1 OR (status != 'expired' AND ends_at > now64(3))
ORDER BY state = 'active' DESC, ends_at DESC
LIMIT {{limit:UInt32}}
"""


def _params(job: str | None, receiver: str | None, range_s: int | None, **extra: object) -> dict[str, object]:
    return {"job": job or "", "receiver": receiver or "", "range_s": range_s or 0, **extra}


def deliveries(store: Store, *, job: str | None = None, receiver: str | None = None, range_s: int | None = None,
               limit: int = 200) -> list[Row]:
    return store.rows("the delivery log", _DELIVERIES_SQL, _params(job, receiver, range_s, limit=limit))


def summary(store: Store, *, job: str | None = None, range_s: int | None = None) -> list[Row]:
    """Per receiver: pending, delivered, failed, lost (expired or dropped), median latency, last error."""
    return store.rows("the delivery summary", _SUMMARY_SQL, _params(job, None, range_s))


def silences(store: Store, *, include_expired: bool = False, limit: int = 200) -> list[Row]:
    return store.rows("silences", _SILENCES_SQL, {"all": int(include_expired), "limit": limit})
