"""Refusals of one service: counted, logged, and raised as `security` alerts, bounded however many arrive.

`Refusals.refuse` makes the `security` alert once per (reporter, decision kind, job[, host]): its
fingerprint names them, not the record, so a flood of one kind is one alert (its evidence `count`:
refusals of that fingerprint so far) and a log line for the first and every 100th. Bounded two ways:
at most `REMEMBERED` fingerprints are kept, the least recently refused forgotten first (a forgotten one
alerts again when it comes back: nothing refused is ever silent for good); and at most `FLOOD` new
fingerprints a minute are raised one by one: beyond that, in that minute, the flood is one alert
(fingerprint ``security/<reporter>/flood``, evidence `count`: new fingerprints that minute), so
forging thousands of distinct kinds, jobs or hosts neither floods the pager nor exhausts the budget.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from vigil.contract import Alert

log = logging.getLogger(__name__)
SECURITY_ALERT = "security"
REMEMBERED = 4096  # fingerprints kept (the least recently refused forgotten first)
FLOOD = 64  # new fingerprints a minute raised one by one; beyond them, one flood alert


@dataclass(frozen=True)
class Refusal:
    what: str  # decision_kind, or what was refused: "member", "checkpoint", "spool/<reason>"
    problem: StrEnum  # a closed reason: `Problem` (signatures), `Claim`, the spool guard's `Refusal`
    detail: str
    job_id: str
    host: str
    event_id: str
    per_host: bool = False  # one alert per (kind, job, host) instead of per (kind, job)

    def __str__(self) -> str:
        return (f"refused {self.what} {self.event_id} (job {self.job_id}, host {self.host}): "
                f"{self.problem.value}{' ' + self.detail if self.detail else ''}")


@dataclass
class Refusals:
    """Refused decisions of one service: counted, logged, and one `security` alert per kind and job."""

    reporter: str  # the service or agent that refused: "controller", "agent:<host>", "notifier"
    count: int = 0
    kinds: Counter[tuple[str, str]] = field(default_factory=Counter)  # (what, problem) -> refusals (metrics; closed sets)
    _alerted: OrderedDict[str, int] = field(default_factory=OrderedDict, repr=False)  # fingerprint -> refusals
    _minute: datetime | None = field(default=None, repr=False)
    _new: int = field(default=0, repr=False)  # new fingerprints in `_minute`

    def fingerprint(self, refusal: Refusal) -> str:
        scope = f"/{refusal.host}" if refusal.per_host else ""
        return f"{SECURITY_ALERT}/{self.reporter}/{refusal.what}/{refusal.job_id}{scope}"[:256]

    def seen(self, fingerprint: str) -> int:
        """Refusals of `fingerprint` so far (0 once it was forgotten)."""
        return self._alerted.get(fingerprint, 0)

    def refuse(self, refusal: Refusal, now: datetime) -> Alert | None:
        """Count and log `refusal`; the security alert to publish the first time its fingerprint is seen
        (the flood's one alert when too many new ones arrive within a minute)."""
        self.count += 1
        self.kinds[(refusal.what, refusal.problem.value)] += 1
        fingerprint = self.fingerprint(refusal)
        if fingerprint in self._alerted:
            self._alerted[fingerprint] += 1
            self._alerted.move_to_end(fingerprint)
            if self._alerted[fingerprint] % 100 == 0:
                log.warning("%s %s (%d of this kind)", self.reporter, refusal, self._alerted[fingerprint])
            return None
        log.warning("%s %s", self.reporter, refusal)
        self._alerted[fingerprint] = 1
        while len(self._alerted) > REMEMBERED:
            self._alerted.popitem(last=False)
        minute = now.replace(second=0, microsecond=0)
        if minute != self._minute:
            self._minute, self._new = minute, 0
        self._new += 1
        if self._new > FLOOD:
            return self._flood(refusal, now) if self._new == FLOOD + 1 else None
        return self._alert(fingerprint, refusal, now, f"{self.reporter} {refusal}",
                           {"refused": refusal.what, "problem": refusal.problem.value, "detail": refusal.detail,
                            "event_id": refusal.event_id, "count": 1})

    def _flood(self, refusal: Refusal, now: datetime) -> Alert:
        fingerprint = f"{SECURITY_ALERT}/{self.reporter}/flood"
        return self._alert(fingerprint, Refusal(what="flood", problem=refusal.problem, detail="", job_id="*",
                                                host="*", event_id=refusal.event_id), now,
                           f"{self.reporter} refused more than {FLOOD} distinct kinds, jobs or hosts within a "
                           f"minute (the latest: {refusal})",
                           {"refused": "flood", "problem": refusal.problem.value, "detail": str(refusal)[:1024],
                            "event_id": refusal.event_id, "count": FLOOD + 1})

    def _alert(self, fingerprint: str, refusal: Refusal, now: datetime, summary: str,
               evidence: dict[str, object]) -> Alert:
        return Alert(job_id=refusal.job_id, host=refusal.host, ts=now, fingerprint=fingerprint, alert=SECURITY_ALERT,
                     subject=refusal.what, status="firing", severity="critical", first_seen=now, last_seen=now,
                     summary=summary[:2048], evidence={"reporter": self.reporter, **evidence})
