"""The gate in front of a service that acts on decisions: signature check, then fencing.

`Gate.admit(events, now)` returns the events the service may act on (facts, and decisions
validly signed by a role that may make them, of a current epoch) and the `security` alerts to
publish for what it refused (once per kind and job: `policy.Refusals`). Fencing: commands carry
the controller's lease `epoch`; for each (job, host) the gate remembers the newest epoch it let
through and refuses older ones. A host's commands are one partition of the `commands` topic
(keyed by host), so "older" is log order, not a producer's clock, and a deposed leader's
late commands are refused once its successor's first one has been read.

Controller steps (`recovery` events a controller signs) are fenced by `step_floor`: the
controller sets it to its own lease epoch once it has led for a moment (it has read what the
previous leader published before the takeover), so a deposed leader's later steps, of an older
epoch, are refused instead of folded as decisions. 0 (standbys, a leader just taking over): no
floor, the log's history of every epoch is folded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from vigil.contract import Alert, Command, Event, RecoveryAction
from vigil.signing.freshness import LogClock, expired, expires
from vigil.signing.policy import (
    CONTROLLER,
    Refusal,
    Refusals,
    attested,
    check,
    decision_kind,
    expected_roles,
    needs_signature,
)
from vigil.signing.seal import Problem, Verifier

REMEMBERED = 100_000  # (job, host) epochs kept; beyond it the oldest entries are dropped


@dataclass
class Gate:
    verifier: Verifier
    refusals: Refusals
    step_floor: int = 0  # controller steps of an older (non-zero) epoch are refused
    clock: LogClock = field(default_factory=LogClock)
    _epochs: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)

    @property
    def refused(self) -> int:
        return self.refusals.count

    def admit(self, events: Iterable[Event], now: datetime, *, acting: bool = True) -> tuple[list[Event], list[Alert]]:
        """What may be acted on (`acting`) or folded (not `acting`: a replay of the log rebuilding state), and the
        security alerts for what was refused; `now` dates the alerts."""
        accepted: list[Event] = []
        alerts: list[Alert] = []
        for e in events:
            refusal = check(e, self.verifier) or self._fence(e)
            if refusal is None and (needs_signature(e) or attested(e)):  # a key vouches for its time: the clock
                # never moves for a claim (a training process's line dated ahead), nor past `now` for an attested
                # fact (a rank's checkpoint line keeps the time the rank gave it)
                log_now = self.clock.advance(e, None if needs_signature(e) else now)
                refusal = stale(e, log_now) if acting else None
            if refusal is None:
                accepted.append(e)
                continue
            alert = self.refusals.refuse(refusal, now)
            if alert is not None:
                alerts.append(alert)
        return accepted, alerts

    def _fence(self, e: Event) -> Refusal | None:
        if isinstance(e, RecoveryAction):
            if 0 < e.epoch < self.step_floor and expected_roles(e) == CONTROLLER:
                return Refusal(what=decision_kind(e), problem=Problem.STALE_EPOCH,
                               detail=f"epoch {e.epoch} < lease epoch {self.step_floor}", job_id=e.job_id,
                               host=e.host, event_id=e.event_id)
            return None
        if not isinstance(e, Command):
            return None
        key = (e.job_id, e.host)
        newest = self._epochs.get(key, 0)
        if e.epoch < newest:
            return Refusal(what=decision_kind(e), problem=Problem.STALE_EPOCH,
                           detail=f"epoch {e.epoch} < {newest}", job_id=e.job_id, host=e.host, event_id=e.event_id)
        if e.epoch > newest:
            self._epochs.pop(key, None)
            self._epochs[key] = e.epoch
            while len(self._epochs) > REMEMBERED:
                del self._epochs[next(iter(self._epochs))]
        return None


def stale(e: Event, now: datetime) -> Refusal | None:
    """The refusal of a decision past its signed bound at `now` (`freshness`); None for a current one or a fact."""
    if not needs_signature(e) or not expired(e, now):
        return None
    return Refusal(what=decision_kind(e), problem=Problem.EXPIRED, job_id=e.job_id, host=e.host, event_id=e.event_id,
                   detail=f"issued {e.ts:%Y-%m-%d %H:%M:%S}, valid until {expires(e):%Y-%m-%d %H:%M:%S}, "
                   f"the log is at {now:%Y-%m-%d %H:%M:%S}")
