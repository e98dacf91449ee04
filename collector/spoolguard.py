"""What the agent accepts from the training side's spool: its own kinds, its own identity.

Training code is untrusted: a spool line is a claim the job makes about itself, never a
decision. `SpoolGuard.admit` lets through only the kinds the training side produces
(`TRAINING_KINDS`: the step timer's ``step`` and ``job`` lines, the checkpointer's
``checkpoint`` lines, Flight Recorder ``collective`` traces) and only when the line names
this agent's host and (when the agent runs one job) this agent's job. Anything else is
refused, counted per `Refusal` reason and logged (first of each reason, then every 100th);
it never reaches a topic. Each reason is also raised once per job as a critical `security`
alert (`vigil.signing.policy.Refusals`, reporter ``agent:<host>``, subject ``spool/<reason>``,
fingerprint ``security/agent:<host>/spool/<reason>/<job>``): `drain()` hands the alerts raised
since its last call, their evidence `count` the refusals of that reason so far, so a flood
read in one pass is one alert that says how many lines it refused. Pure logic: no I/O besides
the log.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from vigil.contract import Alert, Event
from vigil.signing import policy

log = logging.getLogger(__name__)

TRAINING_KINDS: frozenset[str] = frozenset({"step", "job", "checkpoint", "collective"})


class Refusal(StrEnum):
    KIND = "kind"  # a kind the training side never writes (command, member, recovery, ...)
    JOB = "job"  # names another job than the one this agent runs
    HOST = "host"  # names another host than this agent's


@dataclass(kw_only=True)
class SpoolGuard:
    """`job_id` None: the agent serves every job of its host (DaemonSet mode); the host is always checked."""

    host: str
    job_id: str | None
    refused: Counter[Refusal] = field(default_factory=Counter)
    refusals: policy.Refusals | None = None  # default: reporter agent:<host>
    _pending: list[tuple[str, Alert]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.refusals is None:
            self.refusals = policy.Refusals(reporter=f"agent:{self.host}")

    def check(self, event: Event) -> Refusal | None:
        if event.kind not in TRAINING_KINDS:
            return Refusal.KIND
        if event.host != self.host:
            return Refusal.HOST
        if self.job_id is not None and event.job_id != self.job_id:
            return Refusal.JOB
        return None

    def admit(self, event: Event, origin: str) -> bool:
        reason = self.check(event)
        if reason is None:
            return True
        self.refused[reason] += 1
        n = self.refused[reason]
        if n == 1 or n % 100 == 0:
            log.warning("refused spool line (%s, %d so far) in %s: kind %s, job %s, host %s",
                        reason.value, n, origin, event.kind, event.job_id[:64], event.host[:64])
        self._raise(event, reason, origin)
        return False

    def _raise(self, event: Event, reason: Refusal, origin: str) -> None:
        assert self.refusals is not None
        # the alert names the job this agent runs (in DaemonSet mode the job the line claims), never
        # a job the line made up for the agent's one job: a forger cannot page about someone else
        refusal = policy.Refusal(
            what=f"spool/{reason.value}", problem=reason, job_id=self.job_id or event.job_id, host=self.host,
            event_id=event.event_id,
            detail=f"{origin}: kind {event.kind}, job {event.job_id[:64]}, host {event.host[:64]}")
        alert = self.refusals.refuse(refusal, datetime.now(UTC))
        if alert is not None:
            self._pending.append((self.refusals.fingerprint(refusal), alert))

    def drain(self) -> list[Alert]:
        """The security alerts raised since the last call, each with its reason's refusals so far."""
        assert self.refusals is not None
        out = [a.model_copy(update={"evidence": {**a.evidence, "count": self.refusals.seen(fp)}})
               for fp, a in self._pending]
        self._pending.clear()
        return out

    def counts(self) -> dict[str, int]:
        return {r.value: self.refused[r] for r in Refusal}
