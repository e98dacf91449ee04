"""Signatures cover what the signer sent: a signed kind that gains a defaulted field keeps earlier signatures valid.

A rolling upgrade (or a controller refolding its own log) reads events signed by an older version of a kind
with a newer model that has a field more, with a default. The signature leaves out fields at their default, so
the reader's filled-in default is not part of what was signed. Signatures made before this form (every field,
defaults included) still verify; anything else changed still fails.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from pydantic import Field

from vigil.contract import Command, RecoveryAction
from vigil.signing import KeyStore, Role, check
from vigil.signing.seal import Ed25519Signer, KeyRing, Problem, legacy

pytestmark = pytest.mark.pure


class RecoveryActionNext(RecoveryAction):
    """The next version of the kind: one field more, defaulted (what an upgrade adds)."""

    priority: int = Field(default=0, ge=0)


def _ring_and_signer(tmp_path: Path) -> tuple[KeyRing, Ed25519Signer]:
    store = KeyStore(tmp_path / "keys")
    store.ensure()
    kid, key = store.private_key(Role.CONTROLLER)
    return KeyRing(load=store.public_keys), Ed25519Signer(role=Role.CONTROLLER, key_id=kid, key=key)


def test_a_signed_kind_gaining_a_defaulted_field_keeps_old_signatures_valid(tmp_path: Path) -> None:
    ring, signer = _ring_and_signer(tmp_path)
    step = signer.seal(RecoveryAction(job_id="j", host="h1", action="cordon", target="h1", status="started",
                                      incident_id="i", actor="controller", epoch=3))
    wire = step.model_dump_json()  # as an older controller sent it
    read = RecoveryActionNext.model_validate_json(wire)  # as a newer reader parses it: priority = 0 filled in
    assert read.priority == 0 and check(read, ring) is None
    bumped = read.model_copy(update={"priority": 5})  # a field really set differs from what was signed
    assert (r := check(bumped, ring)) is not None and r.problem is Problem.BAD_SIGNATURE
    moved = read.model_copy(update={"target": "h2"})
    assert (r := check(moved, ring)) is not None and r.problem is Problem.BAD_SIGNATURE


def test_signatures_of_the_earlier_form_still_verify(tmp_path: Path) -> None:
    ring, signer = _ring_and_signer(tmp_path)
    cmd = Command(job_id="j", host="h1", command_id="c1", action="dump", epoch=2)
    raw = signer.key.sign(legacy(cmd, Role.CONTROLLER, signer.key_id))  # what a signer before this change made
    old = cmd.model_copy(update={"signature": f"controller/{signer.key_id}/{base64.b64encode(raw).decode()}"})
    assert check(old, ring) is None
    assert check(old.model_copy(update={"epoch": 9}), ring) is not None
