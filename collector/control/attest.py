"""The agent's attestation of the facts that decide: what it says about its own host, signed with its host key.

`Attester.attest` seals an event of an attested kind (`vigil.signing.policy.attested_kind`: a `member` report, an
acknowledgement of a command, a diagnostic result, a checkpoint) that names this agent's host and job, with the
host's own key, so the controller accepts it as this host's word and no other's. It runs where the event is made,
never where it is shipped: the agent seals what it emits *before* its outbox (`Agent.emit`), and the checkpoint
lines the job's ranks write to their spool as the spool is read (`SpoolSource.attest`: a rank's checkpoint is its
host's fact about the job). A line read back from the outbox is shipped as it was written: a training job of the
agent's uid that appends a forged member report to the outbox segment gets it shipped unattested, and the
controller refuses it (an attacker's review found the outbox was a signing oracle while sealing happened at
shipping). A signature a spool line carries is replaced, never trusted; an event naming another host or job is
left unattested. Without a host key nothing is attested and the controller refuses the member reports, acks and
results of this agent: `vigil keys issue HOST` gives it one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vigil.contract import Event
from vigil.signing.policy import attested_kind


@dataclass(kw_only=True)
class Attester:
    host: str
    job_id: str
    seal: Callable[[Any], Any]

    def attest(self, event: Event) -> Event:
        if event.host != self.host or event.job_id != self.job_id or not attested_kind(event):
            return event
        sealed: Event = self.seal(event.model_copy(update={"signature": ""}))
        return sealed
