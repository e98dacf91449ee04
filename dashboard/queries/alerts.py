"""Alerts: current state per incident (`alerts_current`) and the transition history (`alert_events`).

Filters (job, alert kind, severity, host, status) are bound parameters; an empty value
means "any". Evidence is the detector's JSON, shown as stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.store import Row, Store

_FILTER = """({job:String} = '' OR job_id = {job:String})
  AND ({kind:String} = '' OR alert = {kind:String})
  AND ({severity:String} = '' OR severity = {severity:String})
  AND ({host:String} = '' OR host = {host:String})"""

_CURRENT_SQL = f"""
SELECT job_id, fingerprint, alert, subject, host, status, severity, summary,
       toUnixTimestamp64Milli(first_seen) AS first_ms, toUnixTimestamp64Milli(last_seen) AS last_ms,
       toUnixTimestamp64Milli(updated) AS updated_ms, evidence
FROM alerts_current
WHERE {_FILTER} AND ({{status:String}} = '' OR status = {{status:String}})
ORDER BY status = 'firing' DESC, indexOf(['critical', 'error', 'warning', 'info'], severity), updated DESC
LIMIT {{limit:UInt32}}
"""

_HISTORY_SQL = f"""
SELECT toUnixTimestamp64Milli(ts) AS t_ms, job_id, fingerprint, alert, subject, host, status, severity, summary
FROM alert_events
WHERE {_FILTER} AND ({{status:String}} = '' OR status = {{status:String}})
ORDER BY ts DESC LIMIT {{limit:UInt32}}
"""

_OPTIONS_SQL = """
SELECT groupUniqArray(alert) AS kinds, groupUniqArray(host) AS hosts
FROM alerts_current WHERE ({job:String} = '' OR job_id = {job:String})
"""

_COUNTS_SQL = f"""
SELECT severity, status, count() AS n FROM alerts_current WHERE {_FILTER} GROUP BY severity, status
"""


@dataclass(frozen=True, kw_only=True)
class AlertFilter:
    job: str | None = None
    kind: str | None = None
    severity: str | None = None
    host: str | None = None
    status: str | None = None

    def params(self, **extra: object) -> dict[str, object]:
        return {"job": self.job or "", "kind": self.kind or "", "severity": self.severity or "",
                "host": self.host or "", "status": self.status or "", **extra}


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
