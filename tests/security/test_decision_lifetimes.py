"""Every signed decision carries its issue time and a validity bound inside the signed fields, and a consumer that acts
refuses one past it (issue 48, "lifetimes"): the rule is `vigil.signing.freshness`, applied by the gate.

For each decision kind: the signer stamps `valid_s` (its kind's lifetime), a reader cannot stretch it (the
signature breaks), and a genuine decision re-published after the log moved past its bound is refused with one
`security` alert (problem `expired`) by a gate that acts, and admitted by one that rebuilds state. The controller
honours the signed bound of an incident that would open a recovery, and keeps each host's newest member report.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.fleet import Fleet, Harness, incident
from tests.support.signed import sealed
from vigil.contract import (
    Advice,
    Alert,
    Command,
    Diagnostic,
    Event,
    Incident,
    JobRegistered,
    Member,
    Outcome,
    RecoveryAction,
    Silence,
    operator_request,
)
from vigil.contract.base import VALID_MAX_S
from vigil.contract.registry import spec_for
from vigil.contract.wire import validate_event
from vigil.recovery.controller.state import ClusterState
from vigil.signing import KeyStore, Role, check
from vigil.signing.freshness import lifetime, stamp
from vigil.signing.gate import Gate
from vigil.signing.policy import Refusals
from vigil.signing.seal import Ed25519Signer, KeyRing

pytestmark = pytest.mark.pure
NOW = datetime.now(UTC).replace(microsecond=0)


def _alert(at: datetime) -> Alert:
    return Alert(job_id="j", host="h1", ts=at, fingerprint="j/error_log/h1", alert="error_log", subject="h1",
                 status="firing", severity="critical", summary="Xid 79", first_seen=at, last_seen=at)


KINDS: dict[str, Callable[[datetime], Event]] = {
    "command": lambda at: Command(job_id="j", host="h1", ts=at, command_id=f"c-{at:%H%M%S%f}", action="dump",
                                  epoch=1),
    "request (uncordon)": lambda at: operator_request(action="uncordon", host="h1", job_id="j", reason="fixed",
                                                      actor="user:alice").model_copy(update={"ts": at}),
    "approval": lambda at: RecoveryAction(job_id="j", host="h1", ts=at, action="approve", target="j",
                                          status="succeeded", actor="user:alice", incident_id="j/case"),
    "operator cordon": lambda at: RecoveryAction(job_id="j", host="h1", ts=at, action="cordon", target="h1",
                                                 status="succeeded", actor="user:alice"),
    "controller cordon": lambda at: RecoveryAction(job_id="j", host="h1", ts=at, action="cordon", target="h1",
                                                   status="succeeded", actor="controller", epoch=1),
    "controller uncordon": lambda at: RecoveryAction(job_id="j", host="h1", ts=at, action="uncordon", target="h1",
                                                     status="succeeded", actor="controller", epoch=1),
    "controller restart": lambda at: RecoveryAction(job_id="j", host="h1", ts=at, action="restart", target="j",
                                                    status="started", actor="controller", epoch=1),
    "incident": lambda at: incident("j", "h1", at=at),
    "alert": _alert,
    "silence": lambda at: Silence(job_id="*", host="*", ts=at, silence_id="s1", matchers={"job": "j"}, starts_at=at,
                                  ends_at=at + timedelta(hours=2), created_by="alice", reason="maintenance"),
    "advice": lambda at: Advice(job_id="j", host="h1", ts=at, advice_id="a1", nodes=2),
    "verdict": lambda at: Diagnostic(job_id="j", host="h1", ts=at, test="verdict", verdict="faulty"),
    "outcome": lambda at: Outcome(job_id="j", host="h1", ts=at, incident_id="j/case", result="halted"),
}


def issued(home: Path, make: Callable[[datetime], Event], at: datetime) -> Event:
    """A decision its maker signed at `at` (its bound stamped then, as its signer would have)."""
    (e,) = sealed(home, [stamp(make(at), now=at)])
    return e


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_decision_kind_is_signed_with_its_bound_and_the_bound_cannot_be_stretched(kind: str,
                                                                                      tmp_path: Path) -> None:
    e = issued(tmp_path, KINDS[kind], NOW)
    valid_s = getattr(e, "valid_s", None)
    assert valid_s is not None and valid_s == lifetime(e).total_seconds() > 0
    ring = KeyRing(load=KeyStore(tmp_path / "keys").public_keys)
    assert check(e, ring) is None
    stretched = e.model_copy(update={"valid_s": valid_s * 100})
    refusal = check(stretched, ring)
    assert refusal is not None and refusal.problem == "bad signature"


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_old_genuine_decision_re_published_later_is_refused_by_a_gate_that_acts(kind: str,
                                                                                   tmp_path: Path) -> None:
    make = KINDS[kind]
    old = issued(tmp_path, make, NOW - timedelta(days=3))
    newer = issued(tmp_path, make, NOW)
    ring = KeyRing(load=KeyStore(tmp_path / "keys").public_keys)
    acting = Gate(verifier=ring, refusals=Refusals(reporter="agent:h1"))
    admitted, alerts = acting.admit([old, newer], NOW)  # in log order: each current where it stands
    assert admitted == [old, newer] and alerts == []
    admitted, alerts = acting.admit([old.model_copy()], NOW)  # re-published after the log moved on 3 days
    assert admitted == []
    (alert,) = alerts
    assert alert.alert == "security" and alert.evidence["problem"] == "expired"
    assert acting.admit([old.model_copy()], NOW)[1] == []  # counted again, raised once
    assert acting.refused == 2
    rebuilding = Gate(verifier=ring, refusals=Refusals(reporter="controller"))
    rebuilding.admit([newer], NOW, acting=False)
    assert rebuilding.admit([old], NOW, acting=False) == ([old], [])  # rebuilding state is not acting


def test_the_controller_takes_no_recovery_from_an_incident_past_its_signed_bound(tmp_path: Path) -> None:
    """Within the controller's trigger age (15 min) but past the bound its signer gave it: history."""
    fleet = Fleet(job="job-a", hosts=["h0", "h1"])
    h = Harness.build(fleet, tmp_path)
    h.run(lambda: h.engine.state.job("job-a").generation == 1)
    for _ in range(3):
        h.turn()
    expired = incident("job-a", "h1", at=h.now - timedelta(seconds=60)).model_copy(update={"valid_s": 30.0})
    h.feed([expired])
    for _ in range(5):
        h.turn()
    assert not h.actions(action="plan", incident_id=expired.incident_id)
    current = incident("job-a", "h1", at=h.now, iid="job-a/current").model_copy(update={"valid_s": 30.0})
    assert isinstance(current, Incident)
    h.feed([current])
    h.run(lambda: bool(h.actions(action="plan", incident_id="job-a/current")))  # the control: it would act


def test_a_replayed_older_member_report_never_overwrites_the_newer_one() -> None:
    state = ClusterState()

    def report(at: datetime, member_state: str) -> Member:
        return Member(job_id="j", host="h1", ts=at, state=member_state, signature="agent/h1.k/attested")  # type: ignore[arg-type]

    waiting, training = report(NOW - timedelta(minutes=5), "waiting"), report(NOW - timedelta(seconds=2), "training")
    state.apply([waiting, training, waiting.model_copy()])  # the older report re-published after the newer one
    assert state.jobs["j"].members["h1"] == training and state.stale_members == 1
    exited = report(NOW, "exited")
    state.apply([exited])
    assert state.jobs["j"].members["h1"] == exited and state.stale_members == 1


def test_a_bound_longer_than_the_contract_allows_is_stamped_at_its_maximum(tmp_path: Path) -> None:
    """A silence of a century: its bound is the contract's maximum, so it still decodes off the wire."""
    century = Silence(job_id="*", host="*", ts=NOW, silence_id="long", matchers={"job": "j"}, starts_at=NOW,
                      ends_at=NOW + timedelta(days=36_500), created_by="alice", reason="decommissioned")
    (e,) = sealed(tmp_path, [century])
    assert isinstance(e, Silence) and e.valid_s == VALID_MAX_S
    assert Silence.model_validate_json(e.model_dump_json()) == e


def test_a_claim_dated_ahead_does_not_move_the_logs_clock(tmp_path: Path) -> None:
    """An unsigned fact (what a training process may produce) dated 4 minutes ahead, within the contract's skew, does
    not age a genuine decision: only what a key vouches for moves the clock."""
    claim = JobRegistered(job_id="j", host="h1", ts=NOW + timedelta(minutes=4), world_size=1)
    (command,) = sealed(tmp_path, [KINDS["command"](NOW).model_copy(update={"valid_s": 60.0})])
    gate = Gate(verifier=KeyRing(load=KeyStore(tmp_path / "keys").public_keys), refusals=Refusals(reporter="agent:h1"))
    assert gate.admit([claim, command], NOW) == ([claim, command], [])
    assert gate.clock.newest == NOW


def test_an_attested_fact_dated_ahead_moves_the_logs_clock_no_further_than_now(tmp_path: Path) -> None:
    """A rank's checkpoint line keeps the time the rank gave it and its agent attests where it came from, not that
    time: dated 4 minutes ahead (within the skew), it moves the clock to `now`, not past it (review of 2026-12-07)."""
    store = KeyStore(tmp_path / "keys")
    store.ensure()
    store.issue("h1")
    kid, key = store.private_key(Role.AGENT, "h1")
    example = {**spec_for("checkpoint").example, "host": "h1", "ts": (NOW + timedelta(minutes=4)).isoformat()}
    fact = Ed25519Signer(role=Role.AGENT, key_id=kid, key=key).seal(validate_event("checkpoint", example))
    gate = Gate(verifier=KeyRing(load=store.public_keys), refusals=Refusals(reporter="controller"))
    assert gate.admit([fact], NOW) == ([fact], [])
    assert gate.clock.newest == NOW
