"""Signing without a broker: keys on disk, sign and verify, the role table, rotation, fencing."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from vigil.contract import (
    Alert,
    Command,
    DiagnoseParams,
    Incident,
    Outcome,
    RecoveryAction,
    Silence,
    World,
    encode_batch,
)
from vigil.contract.decisions import operator_request
from vigil.contract.wire import decode_batch
from vigil.signing import KeyStore, Role
from vigil.signing.gate import Gate
from vigil.signing.keys import KeyStoreError
from vigil.signing.policy import Refusals, check
from vigil.signing.seal import Ed25519Signer, KeyRing, Problem
from vigil.signing.setup import signer

pytestmark = pytest.mark.pure
NOW = datetime.now(UTC)


def _signer(store: KeyStore, role: Role, host: str = "") -> Ed25519Signer:
    kid, key = store.private_key(role, host)
    return Ed25519Signer(role=role, key_id=kid, key=key)


def _command(**kw: object) -> Command:
    base: dict[str, object] = {"job_id": "j", "host": "h1", "command_id": "j/g2/start/h1", "action": "start",
                               "generation": 2, "world": World(generation=2, hosts=["h1"], node_rank=0,
                                                               master_addr="h1", master_port=29500)}
    return Command(**{**base, **kw})  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> KeyStore:
    s = KeyStore(tmp_path / "keys")
    s.ensure()
    s.issue("h1")  # an agent's key is its host's own
    return s


def test_key_files_private_only_to_owner(store: KeyStore) -> None:
    keys = sorted(store.directory.glob("*.key"))
    assert {p.name.split(".")[0] for p in keys} == {"controller", "analyzer", "operator", "agent"}
    for p in keys:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    for p in store.directory.glob("*.pub"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o644
    assert store.ensure() == {r: store.current_id(r) for r in Role if r is not Role.AGENT}  # idempotent
    assert store.issue("h1") == store.current_id(Role.AGENT, "h1") and store.hosts() == ["h1"]


def test_signed_decision_survives_the_wire(store: KeyStore) -> None:
    ring = KeyRing(load=store.public_keys)
    cmd = _signer(store, Role.CONTROLLER).seal(_command())
    back = decode_batch(encode_batch([cmd])).events[0]
    assert back.signature == cmd.signature and ring.signer_of(back) is Role.CONTROLLER
    assert check(back, ring) is None


def test_tampering_unsigned_and_wrong_role_are_refused(store: KeyStore) -> None:
    ring = KeyRing(load=store.public_keys)
    signed = _signer(store, Role.CONTROLLER).seal(_command())
    tampered = signed.model_copy(update={"generation": 10**9, "world": World(
        generation=10**9, hosts=["h1"], node_rank=0, master_addr="h1", master_port=29500)})
    assert (r := check(tampered, ring)) is not None and r.problem is Problem.BAD_SIGNATURE
    assert (r := check(_command(), ring)) is not None and r.problem is Problem.UNSIGNED
    by_operator = _signer(store, Role.OPERATOR).seal(_command())
    assert (r := check(by_operator, ring)) is not None and r.problem is Problem.WRONG_ROLE
    moved = _command(event_id="f" * 32).model_copy(update={"signature": signed.signature})
    assert (r := check(moved, ring)) is not None and r.problem is Problem.BAD_SIGNATURE


def test_each_decision_needs_its_role(store: KeyStore) -> None:
    store.issue("h2")
    ring = KeyRing(load=store.public_keys)
    op, an, ctl = (_signer(store, r) for r in (Role.OPERATOR, Role.ANALYZER, Role.CONTROLLER))
    request = operator_request(action="cordon", host="h1", job_id="j", reason="r", actor="user:x")
    approve = RecoveryAction(job_id="j", host="controller", action="approve", target="j", status="succeeded",
                             incident_id="i", actor="user:x")
    incident = Incident(job_id="j", host="h1", incident_id="i", category="host_fault", cause="hardware",
                        status="open", severity="critical", summary="s", first_sign=NOW, detected=NOW)
    silence = Silence(job_id="*", host="*", silence_id="s", matchers={"job": "*"}, starts_at=NOW,
                      ends_at=NOW.replace(year=NOW.year + 100), created_by="x", reason="r")
    step = RecoveryAction(job_id="j", host="h1", action="cordon", target="h1", status="started", actor="controller")
    for event, right, wrong in [(request, op, ctl), (approve, op, an), (incident, an, op), (silence, op, ctl),
                                (step, ctl, op)]:
        assert check(right.seal(event), ring) is None, event
        assert check(wrong.seal(event), ring) is not None, event
        assert check(event, ring) is not None, event
    ack = RecoveryAction(job_id="j", host="h1", action="start", target="h1", status="succeeded",
                         command_id="c", actor="agent:h1")
    security = Alert(job_id="j", host="h1", fingerprint="f", alert="security", subject="s", status="firing",
                     severity="critical", summary="s", first_seen=NOW, last_seen=NOW)
    assert check(security, ring) is None  # a claim that pages and decides nothing
    # an ack is a fact that decides: only its own host's agent key attests it
    store.issue("h2")
    assert (r := check(ack, ring)) is not None and r.problem is Problem.UNATTESTED and r.per_host
    assert check(_signer(store, Role.AGENT, "h1").seal(ack), ring) is None
    assert (r := check(_signer(store, Role.AGENT, "h2").seal(ack), ring)) is not None and r.problem is Problem.WRONG_HOST
    assert (r := check(ctl.seal(ack), ring)) is not None and r.problem is Problem.WRONG_ROLE
    outcome = Outcome(job_id="j", host="controller", incident_id="i", result="resumed")
    assert check(outcome, ring) is not None and check(ctl.seal(outcome), ring) is None  # case state: the controller's


def test_rotation_keeps_listed_keys_until_retired(store: KeyStore) -> None:
    ring = KeyRing(load=store.public_keys, reload_s=0)
    old = _signer(store, Role.CONTROLLER).seal(_command())
    new_kid = store.rotate(Role.CONTROLLER)
    assert store.current_id(Role.CONTROLLER) == new_kid
    new = _signer(store, Role.CONTROLLER).seal(_command())
    assert new.signature.split("/")[1] == new_kid
    assert check(old, ring) is None and check(new, ring) is None  # the ring reloads for the unknown key id
    old_kid = old.signature.split("/")[1]
    with pytest.raises(KeyStoreError):
        store.retire(Role.CONTROLLER, new_kid)  # the current key cannot be retired
    running = KeyRing(load=store.public_keys, refresh_s=0)  # a verifier that runs on: it re-reads the key set
    assert check(old, running) is None
    store.retire(Role.CONTROLLER, old_kid)
    assert (r := check(old, running)) is not None and r.problem is Problem.UNKNOWN_KEY  # no restart needed
    ring = KeyRing(load=store.public_keys)
    assert (r := check(old, ring)) is not None and r.problem is Problem.UNKNOWN_KEY
    assert {(k.role, k.key_id) for k in store.listing() if k.role is Role.CONTROLLER} == {(Role.CONTROLLER, new_kid)}


def test_signer_from_settings_without_keys_is_none(tmp_path: Path) -> None:
    assert signer(Role.CONTROLLER, tmp_path) is None


def test_gate_fences_older_epochs_and_alerts_once(store: KeyStore) -> None:
    ctl = _signer(store, Role.CONTROLLER)
    gate = Gate(verifier=KeyRing(load=store.public_keys), refusals=Refusals(reporter="agent:h1"))
    new = ctl.seal(_command(epoch=5))
    old = ctl.seal(_command(epoch=3, command_id="j/g3/start/h1"))
    forged = [_command(command_id=f"forged-{i}") for i in range(3)]
    accepted, alerts = gate.admit([new, old, *forged], NOW)
    assert accepted == [new]
    assert gate.refused == 4
    assert [a.subject for a in alerts] == ["command/start"]  # one alert for the kind and job, not per record
    assert alerts[0].alert == "security" and alerts[0].status == "firing"


def test_diagnose_takes_typed_parameters_never_a_program() -> None:
    with pytest.raises(ValueError):
        _command(action="diagnose", world=None, generation=0, argv=["/bin/sh", "-c", "id"])
    with pytest.raises(ValueError):
        _command(action="diagnose", world=None, generation=0, diagnose=DiagnoseParams(
            group=["h1"], rank=0, master_addr="--help", master_port=1))
    params = DiagnoseParams(group=["h1", "h2"], rank=1, master_addr="10.0.0.1", master_port=29400)
    cmd = _command(action="diagnose", world=None, generation=0, diagnose=params)
    assert cmd.diagnose is not None and [c.value for c in cmd.diagnose.checks] == ["gemm", "alltoall", "allreduce"]


def test_keys_cli_creates_rotates_lists_and_never_prints_key_material(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from vigil.app.cli.main import main

    monkeypatch.setenv("VIGIL_HOME", str(tmp_path / "home"))
    assert main(["keys", "create"]) == 0
    store = KeyStore(tmp_path / "home" / "keys")
    first = store.current_id(Role.OPERATOR)
    assert first is not None
    assert main(["keys", "rotate", "operator"]) == 0
    second = store.current_id(Role.OPERATOR)
    assert second not in (None, first)
    assert main(["keys", "list", "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out.strip().splitlines()[-1])
    assert {(k["key_id"], k["current"]) for k in doc["keys"] if k["role"] == "operator"} == {(first, False),
                                                                                            (second, True)}
    assert "PRIVATE KEY" not in out and "PUBLIC KEY" not in out
    assert main(["keys", "retire", "operator", str(first)]) == 0
    assert [k.key_id for k in store.listing() if k.role is Role.OPERATOR] == [second]


def test_a_private_key_from_the_environment_signs_and_is_never_shown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from vigil.signing import SigningSettings

    pem = Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()).decode()
    monkeypatch.setenv("VIGIL_SIGNING_PRIVATE_KEY", pem)
    monkeypatch.setenv("VIGIL_SIGNING_KEY_ID", "20261125T000000-0000abcd")
    settings = SigningSettings.load()
    assert "PRIVATE" not in repr(settings) and "PRIVATE" not in str(settings.model_dump())
    s = signer(Role.CONTROLLER, tmp_path, settings)
    assert s is not None and s.seal(_command()).signature.startswith("controller/20261125T000000-0000abcd/")


def test_the_agent_runs_its_own_diagnostics_with_the_typed_parameters() -> None:
    import sys

    from vigil.collector.control.diagnose import diagnostics_argv

    params = DiagnoseParams(group=["h1", "h2"], rank=1, master_addr="10.0.0.1", master_port=29400,
                            checks=["gemm"], gemm_size=64)  # type: ignore[list-item]
    argv = diagnostics_argv(params)
    assert argv[:4] == [sys.executable, "-P", "-m", "vigil.recovery.diagnostics"]  # -P: nothing of the cwd
    assert argv[argv.index("--checks") + 1] == "gemm" and argv[argv.index("--group") + 1] == "h1,h2"
    assert argv[argv.index("--gemm-size") + 1] == "64" and argv[argv.index("--rank") + 1] == "1"
