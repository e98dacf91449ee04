"""Alerts: current state per alert (`alerts_current`) and the transition history (`alert_events`).

Each current alert also names the incident it is linked to (`incident_id`, its `role` there:
culprit or victim), from its evidence, so the page can group alerts under incidents.

Filters (job, alert kind, severity, host, status) are bound parameters; an empty value
means "any". The time range, like every page's, is anchored at each job's latest event
(`job_clock`): an incident is shown when it was last seen within `range_s` of it or is
still firing, a state change when it happened within the range. Evidence is the
detector's JSON, shown as stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.contract.severity import sql_rank
from vigil.dashboard.store import Row, Store
from vigil.dashboard.tables import ALERT_EVENTS, ALERTS_CURRENT, JOB_CLOCK

_FILTER = """({job:String} = '' OR job_id = {job:String})
  AND ({kind:String} = '' OR alert = {kind:String})
  AND ({severity:String} = '' OR severity = {severity:String})
  AND ({host:String} = '' OR host = {host:String})"""

# each job's clock; a job missing from it (no telemetry yet) gets the epoch, i.e. no cut
_CLOCK = f"LEFT JOIN (SELECT job_id, max(last_ts) AS job_last FROM {JOB_CLOCK} GROUP BY job_id) AS c USING (job_id)"


def _since(col: str) -> str:
    return f"({{range_s:UInt32}} = 0 OR {col} >= job_last - toIntervalSecond({{range_s:UInt32}}))"


_IN_RANGE = f"(status = 'firing' OR {_since('last_seen')})"

_CURRENT_SQL = f"""
SELECT job_id, fingerprint, alert, subject, host, status, severity, summary,
       toUnixTimestamp64Milli(first_seen) AS first_ms, toUnixTimestamp64Milli(last_seen) AS last_ms,
       toUnixTimestamp64Milli(updated) AS updated_ms, evidence,
       JSONExtractString(evidence, 'incident_id') AS incident_id, JSONExtractString(evidence, 'incident_role') AS role
FROM {ALERTS_CURRENT} {_CLOCK}
WHERE {_FILTER} AND ({{status:String}} = '' OR status = {{status:String}}) AND {_IN_RANGE}
ORDER BY status = 'firing' DESC, -{sql_rank('severity')}, updated DESC
LIMIT {{limit:UInt32}}
"""

_HISTORY_SQL = f"""
SELECT toUnixTimestamp64Milli(ts) AS t_ms, job_id, fingerprint, alert, subject, host, status, severity, summary
FROM {ALERT_EVENTS} {_CLOCK}
WHERE verified = 1 AND {_FILTER} AND ({{status:String}} = '' OR status = {{status:String}}) AND {_since('ts')}
ORDER BY ts DESC LIMIT {{limit:UInt32}}
"""

_OPTIONS_SQL = f"""
SELECT groupUniqArray(alert) AS kinds, groupUniqArray(host) AS hosts
FROM {ALERTS_CURRENT} WHERE ({{job:String}} = '' OR job_id = {{job:String}})
"""

_COUNTS_SQL = f"""
SELECT severity, status, count() AS n FROM {ALERTS_CURRENT} {_CLOCK} WHERE {_FILTER} AND {_IN_RANGE}
GROUP BY severity, status
"""


@dataclass(frozen=True, kw_only=True)
class AlertFilter:
    job: str | None = None
    kind: str | None = None
    severity: str | None = None
    host: str | None = None
    status: str | None = None
    range_s: int | None = None  # seconds before each job's latest event; None: the whole history

    def params(self, **extra: object) -> dict[str, object]:
        return {"job": self.job or "", "kind": self.kind or "", "severity": self.severity or "",
                "host": self.host or "", "status": self.status or "", "range_s": self.range_s or 0, **extra}


@dataclass(frozen=True, kw_only=True)
class AlertOptions:
    kinds: list[str]
    hosts: list[str]


def current(store: Store, f: AlertFilter, limit: int = 500) -> list[Row]:
    return store.rows("current alerts", _CURRENT_SQL, f.params(limit=limit))


def history(store: Store, f: AlertFilter, limit: int = 200) -> list[Row]:
    return store.rows("alert history", _HISTORY_SQL, f.params(limit=limit))


def counts(store: Store, f: AlertFilter) -> dict[tuple[str, str], int]:
    """(severity, status) -> number of incidents."""
    return {(str(r["severity"]), str(r["status"])): int(r["n"]) for r in store.rows("alert counts", _COUNTS_SQL,
                                                                                  f.params())}


def options(store: Store, job: str | None) -> AlertOptions:
    row = store.one("alert filter options", _OPTIONS_SQL, {"job": job or ""})
    if row is None:
        return AlertOptions(kinds=[], hosts=[])
    return AlertOptions(kinds=sorted(str(k) for k in row["kinds"]), hosts=sorted(str(h) for h in row["hosts"] if h))
