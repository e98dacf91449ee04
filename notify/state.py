"""What the notifier knows: the latest event of every alert, incident and silence, folded from the log.

Rebuilt at start by reading the alerts, incidents and silences topics from the beginning,
then kept current by the consumer. Folding is idempotent (an event older than or equal to
what is held changes nothing), so re-reading a stretch of the log after a crash is harmless.
Resolved alerts and incidents are forgotten `resolved_keep_s` after they ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from vigil.contract import Alert, Event, Incident, Silence
from vigil.contract.latest import supersedes
from vigil.notify.silences import SilenceBook


@dataclass(kw_only=True)
class NotifyState:
    alerts: dict[str, Alert] = field(default_factory=dict)
    incidents: dict[str, Incident] = field(default_factory=dict)
    silences: SilenceBook = field(default_factory=SilenceBook)
    events: int = 0

    def apply(self, e: Event) -> bool:
        """Fold one event; True when it changed what is known."""
        self.events += 1
        if isinstance(e, Alert):
            held = self.alerts.get(e.fingerprint)
            if not supersedes(e, held):
                return False
            self.alerts[e.fingerprint] = e
            return True
        if isinstance(e, Incident):
            inc = self.incidents.get(e.incident_id)
            if not supersedes(e, inc):
                return False
            self.incidents[e.incident_id] = e
            return True
        if isinstance(e, Silence):
            return self.silences.apply(e)
        return False

    def prune(self, now: datetime, keep: timedelta) -> int:
        """Forget alerts and incidents resolved before `now - keep`; how many were forgotten."""
        cut = now - keep
        old_alerts = [fp for fp, a in self.alerts.items() if a.status == "resolved" and a.ts < cut]
        old_incidents = [i for i, inc in self.incidents.items() if inc.status == "resolved" and inc.ts < cut]
        for fp in old_alerts:
            del self.alerts[fp]
        for i in old_incidents:
            del self.incidents[i]
        return len(old_alerts) + len(old_incidents)
