"""Incident categories are a closed enum: the controller decides on it, the wire refuses anything else.

The wire value stays the string it always was, so stored incidents, replay and signatures made
before the enum still read and verify.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.signed import sealed
from vigil.contract import Incident, IncidentCategory, RankRef, decode_batch, encode_batch
from vigil.recovery.controller.triggers import classify
from vigil.recovery.settings import PolicySettings
from vigil.signing import KeyStore, Role
from vigil.signing.seal import KeyRing

pytestmark = pytest.mark.pure
NOW = datetime.now(UTC)


def incident_doc(category: str, cause: str = "software") -> dict[str, object]:
    return {"event_id": f"inc-{category}-{cause}", "job_id": "j", "host": "h1", "ts": NOW.isoformat(),
            "incident_id": f"j/{category}/h1/r0/x", "category": category, "cause": cause, "status": "open",
            "severity": "critical", "summary": "s", "culprits": [{"host": "h1", "rank": 0}],
            "first_sign": NOW.isoformat(), "detected": NOW.isoformat()}


def test_an_unknown_category_is_refused_by_the_contract_and_known_ones_keep_their_wire_string() -> None:
    docs = [incident_doc(c) for c in ("host_fault", "collective_hang", "crash_cascade", "pwned", "Host_Fault")]
    decoded = decode_batch(json.dumps({"kind": "incident", "schema_version": 1, "events": docs}).encode())
    assert [e.category for e in decoded.events if isinstance(e, Incident)] == [
        IncidentCategory.HOST_FAULT, IncidentCategory.COLLECTIVE_HANG, IncidentCategory.CRASH_CASCADE]
    assert len(decoded.rejected) == 2 and all("category" in r.reason for r in decoded.rejected)
    wire = json.loads(encode_batch(decoded.events))
    assert [e["category"] for e in wire["events"]] == ["host_fault", "collective_hang", "crash_cascade"]


def test_a_signed_incident_verifies_after_the_wire_and_the_controller_classifies_on_the_enum(tmp_path: Path) -> None:
    incident = Incident(job_id="j", host="h1", incident_id="j/hang", category=IncidentCategory.COLLECTIVE_HANG,
                        cause="unknown", status="open", severity="critical", summary="s", first_sign=NOW, detected=NOW,
                        culprits=[RankRef(host="h1", rank=0)])
    (signed,) = sealed(tmp_path, [incident])
    (back,) = decode_batch(encode_batch([signed])).events
    assert KeyRing(load=KeyStore(tmp_path / "keys").public_keys).signer_of(back) is Role.ANALYZER
    policy = PolicySettings()
    assert isinstance(back, Incident) and classify(back, policy) == "hang"
    by_category = {c: classify(incident.model_copy(update={"category": c}), policy) for c in IncidentCategory}
    assert by_category == {IncidentCategory.COLLECTIVE_HANG: "hang", IncidentCategory.HOST_FAULT: "hardware",
                           IncidentCategory.CRASH_CASCADE: policy.other_as,
                           IncidentCategory.SILENT_DATA_CORRUPTION: policy.other_as,
                           IncidentCategory.NUMERIC_FAULT: policy.other_as}
