"""The recovery does what the Xid catalog says, for what the hardware reported (issue 49).

Pure: the engine against the simulated fleet (tests/support/fleet.py), fed the analyzer's `error_log` alerts as
it writes them (source, catalog action, host_fault): a kernel Xid 31 (application) restarts the job on every
host without a cordon; a kernel Xid 79 (reboot, then check) cordons its host at once and restarts on the
others; a training process's printed Xid 79 (a claim: its own warning alert) and a kernel Xid 92 (watch)
start nothing. A kernel Xid 48 (double-bit ECC: reset the GPU) that names GPU 1 quarantines that GPU of its host
(no backend resets a GPU): the host stays in the job, its next start names the GPU to leave out, and uncordoning
the host clears it; where quarantine is off the host is cordoned. A GPU gone from NVML (`gpu_lost`) cordons its
host; every hardware fault the agent can attest whose catalog action takes the GPU or host out (kernel log,
NVML, DCGM, InfiniBand ports) is a hardware trigger by default.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet import Fleet, Harness
from tests.support.kmsg_lines import (
    AER,
    AER_CORRECTED,
    EDAC_CE,
    EDAC_UE,
    LINK_DOWN,
    MCE,
    OOM,
    OOM_KILL,
    SXID,
    XID,
)
from vigil.collector.ibhealth import IbHealth, PortHealth
from vigil.contract import Alert, Command
from vigil.contract.xid import XidAction, xid_entry

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


def _ib_faults() -> set[tuple[str, XidAction]]:
    """What collector/ibhealth.py raises for a port whose counters keep growing, that goes down, or stays in Polling."""
    ib = IbHealth(job_id=JOB, host="h0", polling_s=0.0, report_s=0.0)
    out = []
    for n in range(5):
        counters = dict.fromkeys(("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors"), n)
        out += ib.update([PortHealth(device="mlx5_0", port=1, state="ACTIVE", phys="LinkUp", counters=counters),
                          PortHealth(device="mlx5_1", port=1, state="ACTIVE", phys="LinkUp")], float(n))
    out += ib.update([PortHealth(device="mlx5_0", port=1, state="DOWN", phys="Disabled"),
                      PortHealth(device="mlx5_1", port=1, state="DOWN", phys="Polling")], 9.0)
    return {(f.category, f.action) for f in out if f.action is not None}


def test_every_hardware_fault_the_agent_attests_that_takes_a_host_out_starts_a_hardware_recovery() -> None:
    """Each (category, catalog action) the agent can attest: the kernel log's line classes, NVML's events and
    counters, DCGM's health watches, the InfiniBand ports. Those whose action takes the GPU or host out are
    `error_log:<category>` hardware triggers by default, and so is every `Member.fault` an agent reports."""
    from vigil.collector.dcgm import CATEGORY
    from vigil.collector.kernelrules import classify_kernel
    from vigil.contract import HARDWARE_FAULTS
    from vigil.contract.xid import HOST_ACTIONS, catalog
    from vigil.recovery.settings import DEFAULT_ALERT_TRIGGERS, PolicySettings

    lines = [*XID.values(), SXID, AER, AER_CORRECTED, LINK_DOWN, OOM, OOM_KILL, EDAC_CE, EDAC_UE, MCE,
             "NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=python, a code the catalog does not hold"]
    kernel = {(f.category, f.action) for line in lines if (f := classify_kernel(line)) is not None and f.action}
    assert {c for c, _ in kernel} == {"xid", "sxid", "pcie_aer", "nic_link_down", "oom", "host_memory", "mce"}
    nvml = {("xid", e.action) for e in catalog().values()} | {  # collector/nvmlevents.py
        ("ecc", XidAction.RESET_GPU), ("ecc", XidAction.CORDON), ("ecc", XidAction.WATCH),
        ("gpu_lost", XidAction.REBOOT_THEN_CHECK)}
    dcgm = set(CATEGORY.values()) | {("gpu_health", XidAction.INVESTIGATE)}
    ib = _ib_faults()
    assert {c for c, _ in ib} == {"ib_link_flap", "ib_port_down", "ib_port_polling", "ib_symbol_errors",
                                  "ib_link_recovery", "ib_rcv_errors"}
    takes_out = {c for c, a in kernel | nvml | dcgm | ib if a in HOST_ACTIONS}
    assert takes_out >= {"xid", "sxid", "pcie_aer", "host_memory", "mce", "ecc", "gpu_lost", "nvlink", "gpu_health",
                         "ib_port_down", "ib_port_polling", "ib_symbol_errors"}
    triggers = PolicySettings().alert_triggers
    assert triggers == DEFAULT_ALERT_TRIGGERS
    missing = sorted(c for c in takes_out | HARDWARE_FAULTS if triggers.get(f"error_log:{c}") != "hardware")
    assert missing == []


def test_a_gpu_gone_from_nvml_cordons_its_host(tmp_path: Path) -> None:
    h = running(tmp_path)
    at = h.now
    h.feed([Alert(job_id=JOB, host="h1", ts=at, fingerprint=f"{JOB}/error_log/h1/gpu_lost", alert="error_log",
                  subject="h1/gpu_lost", status="firing", severity="critical", summary="h1 gpu_lost", first_seen=at,
                  last_seen=at, evidence={"host": "h1", "category": "gpu_lost", "xids": [], "ranks": [],
                                          "source": "nvml", "gpus": [1], "action": "reboot_then_check",
                                          "host_fault": True})])
    h.run(lambda: bool(h.actions(action="cordon", status="succeeded")) and h.training(2))
    (plan,) = plans(h)
    assert plan.details["class"] == "hardware" and plan.details["fault_classes"] == ["gpu_lost"]
    assert sorted(h.engine.state.job(JOB).world) == ["h0", "h2"]
