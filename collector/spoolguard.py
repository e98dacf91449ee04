"""What the agent accepts from the training side's spool: its own kinds, its own identity.

Training code is untrusted: a spool line is a claim the job makes about itself, never a
decision. `SpoolGuard.admit` lets through only the kinds the training side produces
(`TRAINING_KINDS`: the step timer's ``step`` and ``job`` lines, the checkpointer's
``checkpoint`` lines, Flight Recorder ``collective`` traces) and only when the line names
this agent's host and (when the agent runs one job) this agent's job. Anything else is
refused, counted per `Refusal` reason and logged (first of each reason, then every 100th);
it never reaches a topic. Pure logic: no I/O besides the log.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum

from vigil.contract import Event

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
        return False

    def counts(self) -> dict[str, int]:
        return {r.value: self.refused[r] for r in Refusal}
