"""The agent's attestation of the facts that decide: what it ships about its own host, signed with its host key.

`AttestingSink` wraps the agent's sink: every event of an attested kind (`vigil.signing.policy.attested_kind`:
a `member` report, an acknowledgement of a command, a diagnostic result, a checkpoint shipped from the
job's spool) that names this agent's host is sealed with the host's own key before it is delivered, so
the controller accepts it as this host's word and no other's. A signature the training job wrote into a
spool line is replaced, never trusted; an event naming another host (none should) is delivered as is,
unattested. Without a host key (`seal` None) nothing is attested and the controller refuses the
member reports, acks and results of this agent: `vigil keys issue HOST` gives it one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vigil.collector.sink import Sink
from vigil.contract import Event
from vigil.signing.policy import attested_kind


@dataclass(kw_only=True)
class AttestingSink:
    inner: Sink
    host: str
    seal: Callable[[Any], Any]

    def attest(self, event: Event) -> Event:
        if event.host != self.host or not attested_kind(event):
            return event
        sealed: Event = self.seal(event.model_copy(update={"signature": ""}))
        return sealed

    def deliver(self, events: Sequence[Event]) -> None:
        self.inner.deliver([self.attest(e) for e in events])

    def close(self) -> None:
        self.inner.close()
