"""The recovery does what the Xid catalog says, for what the hardware reported (issue 49).

Pure: the engine against the simulated fleet (tests/support/fleet.py), fed the analyzer's `error_log` alerts as
it writes them (source, catalog action, host_fault): a kernel Xid 31 (application) restarts the job on every
host without a cordon; a kernel Xid 79 (reboot, then check) cordons its host at once and restarts on the
others; a training process's printed Xid 79 (a claim: its own warning alert) and a kernel Xid 92 (watch)
start nothing.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet import Fleet, Harness
from vigil.contract import Alert
from vigil.contract.xid import xid_entry

pytestmark = pytest.mark.pure
JOB = "job-x"


def running(tmp: Path) -> Harness:
    h = Harness.build(Fleet(job=JOB, hosts=["h0", "h1", "h2"]), tmp)
    h.run(lambda: h.training(1))
    return h


def plans(h: Harness) -> list[Any]:
    return [p for p in h.actions(action="plan") if p.details["source"] == "alert"]


def xid_alert(host: str, code: int, at: datetime, source: str = "kernel") -> Alert:
    e = xid_entry(code)
    claim = source == "process"
    ev: dict[str, Any] = {"host": host, "category": "xid", "xids": [code], "ranks": [1], "source": source,
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
