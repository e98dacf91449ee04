"""Acks and diagnostic results answer a command only from the host it was sent to (pure: the controller's fold).

The gate admits an ack or result only under the key of the host it names (tests/security/test_signing.py); the
fold then holds them per (command, host), so a compromised node that attests, with its own key, an ack or a
passing self-check for a command sent to another host answers nothing: the pause still waits for that host, the
diagnostics still judge it by its own result.
"""

from __future__ import annotations

import pytest

from vigil.contract import Command, DiagnoseParams, Diagnostic, RecoveryAction
from vigil.recovery.controller.state import ClusterState

pytestmark = pytest.mark.pure


def test_an_ack_or_a_result_counts_only_from_the_commands_host() -> None:
    state = ClusterState()
    pause = Command(job_id="j", host="h1", command_id="case/pause/h1", action="stop")
    diag = Command(job_id="j", host="h1", command_id="case/diagnose/1/h1", action="diagnose", diagnose=DiagnoseParams(
        group=["h1"], rank=0, master_addr="h1", master_port=29500))
    ack = {"job_id": "j", "action": "stop", "target": "h1", "status": "succeeded", "command_id": pause.command_id}
    result = {"job_id": "j", "command_id": diag.command_id, "test": "check"}
    state.apply([pause, diag, RecoveryAction(host="h2", actor="agent:h2", **ack),  # type: ignore[arg-type]
                 Diagnostic(host="h2", ok=True, **result)])  # type: ignore[arg-type]
    assert state.ack(pause.command_id, "h1") is None and state.check_of(diag.command_id, "h1") is None
    state.apply([RecoveryAction(host="h1", actor="agent:h1", **{**ack, "status": "failed"}),  # type: ignore[arg-type]
                 Diagnostic(host="h1", ok=False, **result)])  # type: ignore[arg-type]
    held = state.ack(pause.command_id, "h1")
    assert held is not None and held.status == "failed"  # the forged "succeeded" did not outrank it
    check = state.check_of(diag.command_id, "h1")
    assert check is not None and not check.ok
