"""Untrusted claims the controller reports: a `member` dated ahead, a checkpoint that failed verification.

A training job's facts are claims about itself. Two of them are signs of tampering rather than
faults, and each is raised once per (kind, job, host) as a critical `security` alert
(`vigil.signing.policy.Refusals`, reporter ``controller``):

* a `member` report the wire refused only because its `ts` is dated ahead of this controller's
  clock (`Follower.take_ahead`, typed by the contract's `DatedAhead`, never by message text): it
  never reaches the fold (subject ``member``, problem ``dated ahead``);
* a ``failed`` `checkpoint` event with `unverified` set: rank 0's restore found files that do not
  match the commit marker (tampered with, planted, or another run's) and skipped it (subject
  ``checkpoint``, problem ``checkpoint failed verification``).

Pure logic over events; the service publishes the alerts. Bounded: `Refusals` remembers at most
`policy.REMEMBERED` fingerprints.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vigil.contract import Alert, Checkpoint, Event
from vigil.contract.wire import Rejected
from vigil.signing.policy import Claim, Refusal, Refusals

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
REPORTED_AHEAD = frozenset({"member"})  # kinds whose future-dated copies are raised


def _name(value: Any) -> str:
    """A job or host name out of an invalid payload, made safe for an alert (it is the forger's text)."""
    return _CONTROL.sub("?", value)[:256] if isinstance(value, str) and value else "?"


@dataclass(kw_only=True)
class Claims:
    refusals: Refusals

    def review(self, events: Iterable[Event], ahead: Iterable[Rejected], now: datetime) -> list[Alert]:
        """The security alerts `events` (admitted, about to be folded) and `ahead` (refused) raise."""
        found = [r for r in (self._ahead(r) for r in ahead) if r is not None]
        found += [Refusal(what="checkpoint", problem=Claim.UNVERIFIED_CHECKPOINT, job_id=e.job_id, host=e.host,
                          event_id=e.event_id, per_host=True, detail=f"step {e.step} {e.path[:256]}".strip())
                  for e in events if isinstance(e, Checkpoint) and e.phase == "failed" and e.unverified]
        return [a for r in found if (a := self.refusals.refuse(r, now)) is not None]

    @staticmethod
    def _ahead(rejected: Rejected) -> Refusal | None:
        doc = rejected.payload
        if not rejected.ahead or not isinstance(doc, dict) or doc.get("kind") not in REPORTED_AHEAD:
            return None
        return Refusal(what=str(doc["kind"]), problem=Claim.DATED_AHEAD, job_id=_name(doc.get("job_id")),
                       host=_name(doc.get("host")), event_id=_name(doc.get("event_id"))[:64], per_host=True,
                       detail=f"ts {_name(str(doc.get('ts')))[:64]}")
