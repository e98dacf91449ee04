"""The recovery does what the Xid catalog says, for what the hardware reported (issue 49).

Pure: the engine against the simulated fleet (tests/support/fleet.py), fed the analyzer's `error_log` alerts as
it writes them (source, catalog action, host_fault): a kernel Xid 31 (application) restarts the job on every
host without a cordon; a kernel Xid 79 (reboot, then check) cordons its host at once and restarts on the
others; a training process's printed Xid 79 (a claim: its own warning alert) and a kernel Xid 92 (watch)
start nothing. A kernel Xid 48 (double-bit ECC: reset the GPU) that names GPU 1 quarantines that GPU of its host
(no backend resets a GPU): the host stays in the job, its next start names the GPU to leave out, and uncordoning
the host clears it; where quarantine is off the host is cordoned.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet import Fleet, Harness
from vigil.contract import Alert, Command
from vigil.contract.xid import xid_entry

pytestmark = pytest.mark.pure
JOB = "job-x"


def running(tmp: Path) -> Harness:
    h = Harness.build(Fleet(job=JOB, hosts=["h0", "h1", "h2"]), tmp)
    h.run(lambda: h.training(1))
    return h


def plans(h: Harness) -> list[Any]:
    return [p for p in h.actions(action="plan") if p.details["source"] == "alert"]


def xid_alert(host: str, code: int, at: datetime, source: str = "kernel", gpus: list[int | None] | None = None) -> Alert:
    e = xid_entry(code)
    claim = source == "process"
    ev: dict[str, Any] = {"host": host, "category": "xid", "xids": [code], "ranks": [1], "source": source,
                          "gpus": gpus or [],
                          "action": None if claim else e.action.value, "host_fault": not claim and e.host_fault}
    return Alert(job_id=JOB, host=host, ts=at, fingerprint=f"{JOB}/error_log/{host}/xid{'/claim' if claim else ''}",
                 alert="error_log", subject=f"{host}/xid", status="firing",
                 severity="warning" if claim else e.severity, summary=f"{host} xid {code}", first_seen=at,
                 last_seen=at, evidence=ev)


def test_an_application_xid_restarts_the_job_without_a_cordon(tmp_path: Path) -> None:
    h = running(tmp_path)
    h.feed([xid_alert("h1", 31, h.now)])
    h.run(lambda: bool(plans(h)) and h.training(2))
    (plan,) = plans(h)
    assert plan.details["class"] == "software" and plan.details["steps"] == ["pause", "restart"]
    assert plan.details["fault_classes"] == []  # the application's: no hardware fault to remember
    assert h.actions(action="cordon") == [] and sorted(h.engine.state.job(JOB).world) == ["h0", "h1", "h2"]


def test_a_gpu_off_the_bus_cordons_its_host(tmp_path: Path) -> None:
    h = running(tmp_path)
    h.feed([xid_alert("h2", 79, h.now)])
    h.run(lambda: bool(h.actions(action="cordon", status="succeeded")) and h.training(2))
    (plan,) = plans(h)
    assert plan.details["class"] == "hardware" and "diagnose" not in plan.details["steps"]
    assert plan.details["culprits"][0]["host"] == "h2" and plan.details["culprits"][0]["strong"]
    assert plan.details["fault_classes"] == ["xid:hardware"]  # Xid 79's catalog cause, for fleet memory
    assert [a.target for a in h.actions(action="cordon", status="succeeded") if a.target != JOB] == ["h2"]
    assert sorted(h.engine.state.job(JOB).world) == ["h0", "h1"]


@pytest.mark.parametrize(("code", "source"), [(79, "process"), (92, "kernel")])
def test_a_printed_claim_or_a_watch_starts_nothing(tmp_path: Path, code: int, source: str) -> None:
    h = running(tmp_path)
    h.feed([xid_alert("h1", code, h.now, source=source)])
    for _ in range(10):
        h.turn()
    assert plans(h) == [] and h.actions(action="cordon") == []


def test_a_memory_xid_naming_its_gpu_quarantines_the_gpu_not_the_host(tmp_path: Path) -> None:
    h = running(tmp_path)
    h.feed([xid_alert("h1", 48, h.now, gpus=[1, None])])
    h.run(lambda: bool(h.actions(action="quarantine", status="succeeded")) and h.training(2))
    (plan,) = plans(h)
    assert plan.details["class"] == "hardware"
    assert (plan.details["culprits"][0]["gpus"], plan.details["culprits"][0]["action"]) == ([1], "reset_gpu")
    assert [(a.target, a.details["gpus"]) for a in h.actions(action="quarantine", status="succeeded")] == [("h1", [1])]
    assert [a.target for a in h.actions(action="cordon", status="succeeded") if a.target != JOB] == []
    assert sorted(h.engine.state.job(JOB).world) == ["h0", "h1", "h2"]  # the host keeps its other GPUs
    starts = {c.host: c.world for c in h.fx.events if isinstance(c, Command) and c.action == "start" and c.generation == 2}
    assert {host: w.quarantined_gpus for host, w in starts.items() if w is not None} == {"h0": [], "h1": [1], "h2": []}
    backend = h.fx.backend
    assert {k: v.gpus for k, v in backend.quarantined().items()} == {"h1": (1,)} and backend.cordoned() == {}
    assert backend.uncordon("h1", reason="GPU replaced", actor="user:ops").data["released_gpus"] == [1]
    assert backend.quarantined() == {}


def test_without_quarantine_a_memory_xid_cordons_its_host(tmp_path: Path) -> None:
    h = Harness.build(Fleet(job=JOB, hosts=["h0", "h1", "h2"]), tmp_path, policy_quarantine_gpus=False)
    h.run(lambda: h.training(1))
    h.feed([xid_alert("h1", 48, h.now, gpus=[1])])
    h.run(lambda: bool(h.actions(action="cordon", status="succeeded")) and h.training(2))
    assert h.actions(action="quarantine") == []
    assert [a.target for a in h.actions(action="cordon", status="succeeded") if a.target != JOB] == ["h1"]


def test_a_memory_xid_without_its_gpu_cordons_its_host(tmp_path: Path) -> None:
    h = running(tmp_path)
    h.feed([xid_alert("h1", 48, h.now)])
    h.run(lambda: bool(h.actions(action="cordon", status="succeeded")) and h.training(2))
    assert h.actions(action="quarantine") == []
    assert sorted(h.engine.state.job(JOB).world) == ["h0", "h2"]
