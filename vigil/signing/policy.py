"""Which role may make which decision, and what a service does with one that is not signed so.

`expected_roles(event)` is the closed table: commands, controller steps and plans, verdicts
and controller pages are the controller's; incidents and alerts the analyzer's (pages also the
controller's); operator requests, approvals, operator cordons and silences the operator's; advice
the analyzer's or the operator's (`vigil advise --publish`). An
empty set is a fact (agent acknowledgements, agents' own diagnostics, security alerts: a claim
that pages and decides nothing), acted on unsigned. `check` returns a `Refusal` for a decision
without a valid signature of an expected role. `Refusals` counts them and makes the `security`
alert once per (reporter, decision kind, job[, host]): its fingerprint names them, not the record,
so a flood is one alert (its evidence `count`: refusals of that fingerprint so far) and a log
line for the first and every 100th. An **attested fact** (`attested_kind`: a `member` report,
an agent's acknowledgement of a command, its diagnostic result, a checkpoint it shipped) decides only
when the agent of the host it speaks for signed it with that host's own key (`keys.host_of`): one
signed by any other key is refused (`Problem.WRONG_HOST`, `WRONG_ROLE`), and so is an unsigned one
of the kinds that must be attested (`must_attest`: all but checkpoints, which are plain facts that
decide nothing unattested), each refusal raised once per (kind, job, host). Besides decisions, a
service refuses untrusted claims (`Claim`: a fact dated ahead, a checkpoint that failed
verification) and the agent forged spool lines the same way.
"""

from __future__ import annotations

from enum import StrEnum

from vigil.contract import (
    Advice,
    Alert,
    Checkpoint,
    Command,
    Diagnostic,
    Event,
    Incident,
    LogLine,
    Member,
    Outcome,
    RecoveryAction,
    Silence,
)
from vigil.contract.decisions import is_operator_request
from vigil.contract.xid import ATTESTED_SOURCES
from vigil.signing.keys import Role, host_of
from vigil.signing.refusals import REMEMBERED, SECURITY_ALERT, Refusal, Refusals
from vigil.signing.seal import Problem, Unverified, Verifier

__all__ = ["REMEMBERED", "SECURITY_ALERT", "Claim", "Refusal", "Refusals", "attested", "attested_kind", "check",
           "decision_kind", "expected_roles", "is_ack", "must_attest", "needs_signature", "vouched_fact"]

NONE: frozenset[Role] = frozenset()
CONTROLLER = frozenset({Role.CONTROLLER})
OPERATOR = frozenset({Role.OPERATOR})


class Claim(StrEnum):
    """Why a fact (a training job's claim about itself) was refused or reported, besides signatures."""

    DATED_AHEAD = "dated ahead"  # its ts is ahead of the reader's clock by more than the contract allows
    UNVERIFIED_CHECKPOINT = "checkpoint failed verification"  # its files do not match its commit marker


def decision_kind(event: Event) -> str:
    """A short name of the decision, for logs and the security alert: command/diagnose, recovery/request, ..."""
    if isinstance(event, Command):
        return f"command/{event.action}"
    if isinstance(event, RecoveryAction):
        if is_operator_request(event):
            return "recovery/request"
        return "recovery/approve" if event.action == "approve" else f"recovery/{event.action}"
    return str(event.kind)


def expected_roles(event: Event) -> frozenset[Role]:
    if isinstance(event, Command):
        return CONTROLLER
    if isinstance(event, RecoveryAction):
        if is_operator_request(event):
            return OPERATOR if event.status == "planned" else CONTROLLER
        if is_ack(event):
            return NONE
        return OPERATOR if event.actor.startswith("user:") else CONTROLLER
    if isinstance(event, Incident):
        return frozenset({Role.ANALYZER})
    if isinstance(event, Alert):
        return NONE if event.alert == SECURITY_ALERT else frozenset({Role.ANALYZER, Role.CONTROLLER})
    if isinstance(event, Silence):
        return OPERATOR
    if isinstance(event, Advice):
        return frozenset({Role.ANALYZER, Role.OPERATOR})
    if isinstance(event, Diagnostic):
        return CONTROLLER if event.test == "verdict" else NONE
    if isinstance(event, Outcome):
        return CONTROLLER
    return NONE


def is_ack(event: RecoveryAction) -> bool:
    """An agent's acknowledgement of a command (a fact its host attests)."""
    return event.actor.startswith("agent:") and bool(event.command_id) and event.action in (
        "start", "stop", "diagnose", "dump", "finish")


def attested_kind(event: Event) -> bool:
    """A fact that decides when its host's agent attests it: member, ack, diagnostic result, checkpoint."""
    if isinstance(event, RecoveryAction):
        return is_ack(event)
    if isinstance(event, Diagnostic):
        return event.test != "verdict"
    if isinstance(event, LogLine):
        return event.source in ATTESTED_SOURCES
    return isinstance(event, Member | Checkpoint)


def must_attest(event: Event) -> bool:
    """An attested kind refused unattested (a checkpoint unattested is a fact that decides nothing)."""
    return attested_kind(event) and not isinstance(event, Checkpoint | LogLine)


def vouched_fact(event: Event, verifier: Verifier) -> bool:
    """A hardware fact (`LogLine` of source kernel, nvml or sysfs) that its own host's agent attested: the only kind
    whose `source` and `action` may decide. Unattested (anyone can produce to Kafka: an attacker's review), it is a
    claim like a training process's output; the analyzer's ingest stores it so (`source` process)."""
    return attested_kind(event) and attested(event) and check(event, verifier) is None


def needs_signature(event: Event) -> bool:
    return bool(expected_roles(event))


def attested(event: Event) -> bool:
    """`event` is an attested kind that carries an attestation (verified by `check` before it is folded)."""
    return attested_kind(event) and bool(getattr(event, "signature", ""))


def check(event: Event, verifier: Verifier) -> Refusal | None:
    """None when `event` is a fact (an attested kind validly attested by its own host's agent, or unattested
    where that decides nothing) or a decision validly signed by a role that may make it."""
    roles = expected_roles(event)
    fact = not roles
    if fact and not attested_kind(event):
        return None
    if fact and not attested(event):
        if not must_attest(event):
            return None
        return _refusal(event, Problem.UNATTESTED, f"needs the attestation of {event.host}'s agent", True)
    try:
        role, key_id = verifier.signed_by(event)
    except Unverified as exc:
        return _refusal(event, exc.problem, str(exc).partition(": ")[2], fact)
    if fact:
        if role is not Role.AGENT:
            return _refusal(event, Problem.WRONG_ROLE, f"signed by {role.value}, needs agent", True)
        if host_of(key_id) != event.host:
            return _refusal(event, Problem.WRONG_HOST, f"key of {host_of(key_id) or 'no host'}", True)
        return None
    if role in roles:
        return None
    return _refusal(event, Problem.WRONG_ROLE, f"signed by {role.value}, needs {'/'.join(sorted(roles))}", False)


def _refusal(event: Event, problem: StrEnum, detail: str, per_host: bool) -> Refusal:
    return Refusal(what=decision_kind(event), problem=problem, detail=detail, job_id=event.job_id, host=event.host,
                   event_id=event.event_id, per_host=per_host)
