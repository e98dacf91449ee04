"""What the operator CLI publishes records its identity: the operator key that signs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vigil.app.cli.recovery import with_identity
from vigil.contract import Alert, RecoveryAction
from vigil.signing import KeyStore, Role
from vigil.signing.seal import Ed25519Signer, KeyRing

pytestmark = pytest.mark.pure


def test_cli_events_carry_the_signing_operator_key_and_still_verify(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.ensure()
    kid, key = store.private_key(Role.OPERATOR)
    approve = RecoveryAction(job_id="j", host="controller", action="approve", target="j", status="succeeded",
                             incident_id="j/case", actor="user:ops", details={"note": "x"})
    other = Alert(job_id="j", host="h", fingerprint="f", alert="a", subject="s", status="firing", severity="info",
                  summary="s", first_seen=approve.ts, last_seen=approve.ts)
    stamped, untouched = with_identity([approve, other], f"key:operator/{kid}")
    assert stamped.details == {"note": "x", "identity": f"key:operator/{kid}"} and untouched is other
    signed = Ed25519Signer(role=Role.OPERATOR, key_id=kid, key=key).seal(stamped)
    assert KeyRing(load=store.public_keys).signer_of(signed) is Role.OPERATOR
