"""Incidents (`incidents_current`): the culprit, its victims and the alerts each one groups.

Filtered like the alerts page: by job, and by the shared time range anchored at each job's
latest event (an incident is shown when still open or last updated within the range).
Culprits and victims come back parsed (host, rank, coords, own message).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from vigil.dashboard.store import Store
from vigil.dashboard.tables import INCIDENTS_CURRENT, JOB_CLOCK

_SQL = f"""
SELECT job_id, incident_id, category, cause, status, severity, confidence, summary, culprits, victims, alerts,
       toUnixTimestamp64Milli(first_sign) AS first_ms, toUnixTimestamp64Milli(detected) AS detected_ms,
       toUnixTimestamp64Milli(updated) AS updated_ms
FROM {INCIDENTS_CURRENT}
LEFT JOIN (SELECT job_id, max(last_ts) AS job_last FROM {JOB_CLOCK} GROUP BY job_id) AS c USING (job_id)
WHERE ({{job:String}} = '' OR job_id = {{job:String}})
  AND (status = 'open' OR {{range_s:UInt32}} = 0 OR updated >= job_last - toIntervalSecond({{range_s:UInt32}}))
ORDER BY status = 'open' DESC, first_sign DESC
LIMIT {{limit:UInt32}}
"""


@dataclass(frozen=True, kw_only=True)
class Party:
    host: str
    rank: int | None
    message: str
    coords: dict[str, int] = field(default_factory=dict)

    @property
    def who(self) -> str:
        return f"{self.host} rank {self.rank}" if self.rank is not None else f"host {self.host}"


@dataclass(frozen=True, kw_only=True)
class IncidentRow:
    job_id: str
    incident_id: str
    category: str
    cause: str
    status: str
    severity: str
    confidence: str
    summary: str
    culprits: list[Party]
    victims: list[Party]
    alerts: list[str]
    first_ms: int
    detected_ms: int
    updated_ms: int


def _parties(raw: Any) -> list[Party]:
    try:
        items = json.loads(raw or "[]")
    except ValueError:
        return []
    return [Party(host=str(p.get("host", "")), rank=p.get("rank"), message=str(p.get("message") or ""),
                  coords=dict(p.get("coords") or {})) for p in items if isinstance(p, dict)]


def incidents(store: Store, *, job: str | None, range_s: int | None, limit: int = 50) -> list[IncidentRow]:
    rows = store.rows("incidents", _SQL, {"job": job or "", "range_s": range_s or 0, "limit": limit})
    return [IncidentRow(job_id=str(r["job_id"]), incident_id=str(r["incident_id"]), category=str(r["category"]),
                        cause=str(r["cause"]), status=str(r["status"]), severity=str(r["severity"]),
                        confidence=str(r["confidence"]), summary=str(r["summary"]), culprits=_parties(r["culprits"]),
                        victims=_parties(r["victims"]), alerts=[str(a) for a in r["alerts"]],
                        first_ms=int(r["first_ms"]), detected_ms=int(r["detected_ms"]),
                        updated_ms=int(r["updated_ms"])) for r in rows]
