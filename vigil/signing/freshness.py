"""Every signed decision's lifetime: issued at `ts`, valid for `valid_s`, both inside the signed fields.

The one home of the rule (issue 48, "lifetimes"). A decision (any kind `policy.expected_roles` gives a signing
role) is issued at its `ts` and valid until `ts + valid_s`; the signer stamps `valid_s` with its kind's lifetime
(`LIFETIMES`, `stamp`, called by `seal.Ed25519Signer.seal` before it signs every kind that has the field, facts an agent
attests included, whose bound nothing reads; alerts and incidents, dated in event
time, which an analyzer catching up dates behind the clock, get their lifetime from the moment they are signed),
so the bound is signed with the rest and a reader cannot stretch it. A decision signed before the field existed has its kind's lifetime (`lifetime`).

A consumer that *acts* on a decision (the agent on a command, the notifier on an alert, incident or step, the
controller on an operator request, an approval, an incident or alert that would open a recovery) acts only while
`expired(event, now)` is False; one past its bound is refused (`gate.stale`: a `Refusal` of problem `expired`,
counted and raised as a `security` alert like a forged one), never acted on. `now` is the log's clock (`LogClock`: the
newest `ts` of a signed decision or attested fact this consumer admitted, event by event in log order, or the
consumer's tick time), so history read in
log order is current where it stands, and a genuine decision re-published later, after the log moved past its
bound, is a replay. Rebuilding state from the log is not acting: a fold admits every genuine decision whatever its
age (`gate.Gate.admit(..., acting=False)`); only the step that would act checks the bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from vigil.contract import (
    Advice,
    Alert,
    Command,
    Diagnostic,
    Event,
    Incident,
    Outcome,
    RecoveryAction,
    Silence,
)
from vigil.contract.base import VALID_MAX_S
from vigil.contract.decisions import is_operator_request

E = TypeVar("E", bound=Event)

MINUTE, HOUR, DAY = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)
COMMAND = 10 * MINUTE  # the least lifetime of a command (a longer `timeout_s` lengthens it)
REQUEST = DAY  # operator requests and approvals: the controller's state retention (`compaction.Retention.keep`)
LIFETIMES: dict[str, timedelta] = {
    "command": COMMAND,
    "recovery/request": REQUEST,  # an operator's cordon / uncordon / evict request
    "recovery/operator": REQUEST,  # an approval, an operator's own cordon record
    "recovery/controller": DAY,  # a controller step (what it did, and the notifier's pages)
    "incident": HOUR,  # re-published while what is known changes; the controller takes none older than 15 min
    "alert": HOUR,  # re-published every refresh while firing
    "diagnostic": HOUR,  # the controller's verdict on a host
    "outcome": DAY,
    "advice": DAY,
    "silence": DAY,  # at least: a silence is valid until its own `ends_at`
}


def _key(event: Event) -> str | None:
    if isinstance(event, RecoveryAction):
        if is_operator_request(event):
            return "recovery/request"
        return "recovery/operator" if event.actor.startswith("user:") else "recovery/controller"
    if isinstance(event, Command | Incident | Outcome | Advice | Silence) or (
            isinstance(event, Diagnostic) and event.test == "verdict"):
        return str(event.kind)
    return "alert" if isinstance(event, Alert) else None


def lifetime(event: Event) -> timedelta:
    """The lifetime the signer stamps on `event` (and what a decision signed without one is given)."""
    key = _key(event)
    base = LIFETIMES.get(key, HOUR) if key else HOUR
    if isinstance(event, Command):
        return max(base, timedelta(seconds=event.timeout_s))
    if isinstance(event, Silence):
        return max(base, event.ends_at - event.ts)
    return base


def stamp(event: E, now: datetime | None = None) -> E:
    """`event` with `valid_s` set when it is a decision kind that has none yet: valid for its kind's lifetime after
    its `ts`; an alert or incident (dated in event time: an analyzer catching up dates them behind the clock) for its
    kind's lifetime after it is signed (`now`)."""
    if "valid_s" not in type(event).model_fields or getattr(event, "valid_s", None) is not None:
        return event
    behind = timedelta(0)
    if isinstance(event, Alert | Incident):
        behind = max(behind, (now or datetime.now(UTC)) - event.ts)
    valid_s = min(round((lifetime(event) + behind).total_seconds(), 3), VALID_MAX_S)  # a silence of years: 400 days
    return event.model_copy(update={"valid_s": valid_s})


def expires(event: Event) -> datetime:
    valid_s = getattr(event, "valid_s", None)
    return event.ts + (timedelta(seconds=valid_s) if valid_s is not None else lifetime(event))


def expired(event: Event, now: datetime) -> bool:
    """`event` is past its bound at `now` (the gate asks it of decisions only: facts are not acted on as orders)."""
    return now > expires(event)


@dataclass
class LogClock:
    """The log's clock of one consumer: the newest `ts` it admitted (None before the first)."""

    newest: datetime | None = None

    def advance(self, event: Event, cap: datetime | None = None) -> datetime:
        """Moved to `event.ts`, or to `cap` when that is earlier (an attested fact: its host's key vouches for where
        it came from, not for a time the training side may have chosen)."""
        ts = event.ts if cap is None else min(event.ts, cap)
        self.newest = ts if self.newest is None else max(self.newest, ts)
        return self.newest
