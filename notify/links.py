"""Links into the dashboard: every notification points at the page that explains it.

A straggler opens the heatmap, a NIC stall the network page, MFU drift the overview, an
error, exit or lost heartbeat the host's page; an incident opens its culprit's host page.
Every notification also links the job's alerts. The base URL is `VIGIL_NOTIFY_DASHBOARD_URL`
(what on-call can reach), else the one the application passes in (the dashboard's own listening
address: the notifier does not import the dashboard).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from vigil.contract import Alert, Incident
from vigil.notify.matchers import culprit_hosts

_PAGE_OF_KIND = {"straggler": "/heatmap", "traffic_stall": "/network", "mfu_drift": "/overview"}


@dataclass(frozen=True)
class Links:
    base: str

    def page(self, path: str, **query: str) -> str:
        q = {k: v for k, v in query.items() if v}
        return self.base.rstrip("/") + path + ("?" + urlencode(q) if q else "")

    def alert(self, a: Alert) -> str:
        path = _PAGE_OF_KIND.get(a.alert)
        if path is not None:
            return self.page(path, job=a.job_id)
        return self.page("/host", job=a.job_id, host=a.host)

    def incident(self, i: Incident) -> str:
        return self.page("/host", job=i.job_id, host=culprit_hosts(i)[0])

    def alerts(self, job: str, kind: str = "") -> str:
        return self.page("/alerts", job=job, kind=kind)
