"""The controller's replay verdict on an SDC or numeric incident (pure): the table, the snapshot, the signed outcome."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.signed import sealed
from vigil.contract import RecoveryAction
from vigil.contract.wire import decode_batch, encode_batch
from vigil.recovery.controller.sdc import (
    Action,
    Replay,
    Verdict,
    action_for,
    decide,
    outcome,
    replay_start,
    reproduced,
)
from vigil.signing import KeyStore, Role
from vigil.signing.seal import KeyRing

pytestmark = pytest.mark.pure
EVIDENCE = {"signal": "digest", "rank": 1, "host": "gnode-1", "step": 15, "good_step": 10}


def r(host: str, seen: bool | None, steps: int = 5) -> Replay:
    return Replay(host=host, reproduced=seen, steps=steps)


def test_the_verdict_table() -> None:
    assert decide(r("s", True), r("p", False)) == (Verdict.PERSISTENT, True)
    assert decide(r("s", True), None) == (Verdict.PERSISTENT, False)  # one machine: the GPU or the batch, weakly
    assert decide(r("s", True), r("p", None)) == (Verdict.PERSISTENT, False)
    assert decide(r("s", True), r("p", True)) == (Verdict.BATCH, True)
    assert decide(r("s", False), r("p", False)) == (Verdict.TRANSIENT, True)
    assert decide(r("s", False), None) == (Verdict.TRANSIENT, True)
    assert decide(r("s", None), r("p", False)) == (Verdict.UNDECIDED, False)
    assert decide(None, None) == (Verdict.UNDECIDED, False)
    assert reproduced(7, majority=7) is False and reproduced(8, majority=7) is True and reproduced(None, 7) is None


def test_actions_keep_within_the_breaker() -> None:
    assert action_for(Verdict.PERSISTENT, 1) is Action.CORDON
    assert action_for(Verdict.PERSISTENT, 0) is Action.CORDON_REFUSED
    assert action_for(Verdict.BATCH, 0) is Action.SKIP_BATCH and action_for(Verdict.TRANSIENT, 0) is Action.COUNT
    assert action_for(Verdict.UNDECIDED, 5) is Action.NONE


def test_the_replay_starts_from_the_newest_snapshot_before_the_divergence() -> None:
    assert replay_start([0, 5, 10, 12, 15], EVIDENCE) == 10  # 12 may already hold the flip (after the last agreement)
    assert replay_start([0, 5, 12, 14], {"step": 15, "good_step": None}) == 14
    assert replay_start([16, 20], EVIDENCE) is None


def test_the_outcome_records_verdict_and_steps_recomputed_and_is_signed_by_the_controller(tmp_path: Path) -> None:
    event = outcome(job_id="j", incident_id="j/silent_data_corruption/gnode-1/x", evidence=EVIDENCE, snapshot_step=10,
                    suspect=r("gnode-1", True), peer=r("spare-0", False), allowance=1)
    replay = event.details["replay"]
    assert (replay["verdict"], replay["action"], replay["steps_recomputed"], replay["snapshot_step"]) == \
        ("persistent", "cordon", 10, 10)
    assert event.target == "gnode-1" and event.details["fault_classes"] == ["sdc"]
    (signed,) = sealed(tmp_path, [event])
    (back,) = decode_batch(encode_batch([signed])).events
    assert isinstance(back, RecoveryAction) and back.details == event.details
    assert KeyRing(load=KeyStore(tmp_path / "keys").public_keys).signer_of(back) is Role.CONTROLLER
    batch = outcome(job_id="j", incident_id="i", evidence=EVIDENCE, snapshot_step=10, suspect=r("gnode-1", True),
                    peer=r("gnode-2", True), allowance=0)
    assert batch.details["skip"] == {"from_step": 11, "to_step": 15, "rank": 1} and batch.details["fault_classes"] == []
    refused = outcome(job_id="j", incident_id="i", evidence=EVIDENCE, snapshot_step=10, suspect=r("gnode-1", True),
                      peer=None, allowance=0, breaker_why="3 cordons in the last hour")
    assert refused.details["replay"]["action"] == "cordon_refused" and "breaker" in refused.reason
