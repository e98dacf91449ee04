"""Fleet memory (pure, the engine against the simulated fleet): a host suspected by three hardware recoveries
within a day is cordoned by the third though its diagnostics pass every time; with `repeat_faults` 0, never."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.fleet import Fleet, Harness, incident

pytestmark = pytest.mark.pure
JOB = "job-m"


def cordons_per_fault(tmp: Path, **settings: object) -> list[list[str]]:
    return faults(tmp, **settings)[1]


def faults(tmp: Path, classes: tuple[list[str], ...] = ([], [], []), **settings: object
           ) -> tuple[Harness, list[list[str]]]:
    h = Harness.build(Fleet(job=JOB, hosts=["h0", "h1", "h2"]), tmp, **settings)
    h.run(lambda: h.training(1))
    out = []
    for n, fault_classes in enumerate(classes, 1):
        for _ in range(5):  # training a while: the fault's first sign is after the generation started
            h.turn()
        inc = incident(JOB, "h1", strong=False, at=h.now, iid=f"{JOB}/host_fault/h1/{n}")  # weak: diagnosed
        inc = inc.model_copy(update={"evidence": {"fault_classes": fault_classes}})
        h.feed([inc])
        h.run(lambda iid=inc.incident_id: (c := h.engine.state.cases.get(iid)) is not None and c.outcome is not None)
        assert h.engine.state.cases[inc.incident_id].cls == "hardware"
        assert "diagnose" in h.engine.state.cases[inc.incident_id].plan
        out.append([a.target for a in h.actions(action="cordon", status="succeeded", incident_id=inc.incident_id)
                    if a.target != JOB])
    return h, out


def test_the_third_fault_within_a_day_cordons_the_host_its_diagnostics_pass(tmp_path: Path) -> None:
    assert cordons_per_fault(tmp_path) == [[], [], ["h1"]]


def test_only_the_same_class_of_fault_repeats(tmp_path: Path) -> None:
    """Memory, NVLink, memory: two of a class, no cordon; the third memory Xid condemns the host."""
    mem, link = ["xid:memory"], ["xid:nvlink"]
    assert faults(tmp_path, (mem, link, mem, mem))[1] == [[], [], [], ["h1"]]


def test_fleet_memory_off(tmp_path: Path) -> None:
    assert cordons_per_fault(tmp_path, policy_repeat_faults=0) == [[], [], []]


def test_recovery_status_shows_each_hosts_fault_history(tmp_path: Path) -> None:
    """`vigil recovery status`'s fault history: the host's three hardware recoveries, newest first, the third
    the one that cordoned it, all three in fleet memory's window, and its cordon now."""
    from vigil.recovery.backends.base import CordonInfo
    from vigil.recovery.controller.faulthistory import fault_history, format_faults

    h, _ = faults(tmp_path)
    cordon = CordonInfo(host="h1", reason="repeat offender: 3 hardware faults in 24 h", by="vigil")
    doc = fault_history(h.engine.state, {"h1": cordon}, h.now, window_s=86_400, repeat_faults=3)
    assert list(doc) == ["h1"]  # the others were never suspected
    got = doc["h1"]
    assert (got["total"], got["in_window"], got["cordon"]["reason"]) == (3, 3, cordon.reason)
    assert [f["cordoned"] for f in got["faults"]] == [True, False, False]
    assert all(f["class"] == "hardware" and f["result"] == "resumed" for f in got["faults"])
    assert [f["at"] for f in got["faults"]] == sorted((f["at"] for f in got["faults"]), reverse=True)
    assert fault_history(h.engine.state, {}, h.now + timedelta(days=2), window_s=86_400,
                         repeat_faults=3)["h1"]["in_window"] == 0
    text = "\n".join(format_faults(doc))
    assert "h1: 3 hardware/hang/sdc recoveries, 3 of 3 in fleet memory's window; cordoned (repeat offender" in text
    assert text.count(", cordoned  ") == 1


def test_silent_data_corruption_named_again_and_again_condemns_the_host(tmp_path: Path) -> None:
    """Issue 51: each SDC incident (a replica named by the digest majority) is counted against its host as fault
    class `sdc` (analyzer/incidents/numeric.py); the third within the window cordons it though its diagnostics pass,
    and an Xid of another class in between does not add to the count."""
    h = Harness.build(Fleet(job=JOB, hosts=["h0", "h1", "h2"]), tmp_path)
    h.run(lambda: h.training(1))
    out = []
    kinds = [("silent_data_corruption", ["sdc"]), ("host_fault", ["xid:memory"]), ("silent_data_corruption", ["sdc"]),
             ("silent_data_corruption", ["sdc"])]
    for n, (category, fault_classes) in enumerate(kinds, 1):
        for _ in range(5):
            h.turn()
        inc = incident(JOB, "h1", strong=False, at=h.now, iid=f"{JOB}/{category}/h1/{n}", category=category,
                       cause="unknown" if category != "host_fault" else "hardware")
        h.feed([inc.model_copy(update={"evidence": {"fault_classes": fault_classes, "signal": "digest"}})])
        h.run(lambda iid=inc.incident_id: (c := h.engine.state.cases.get(iid)) is not None and c.outcome is not None)
        out.append([a.target for a in h.actions(action="cordon", status="succeeded", incident_id=inc.incident_id)
                    if a.target != JOB])
    assert out == [[], [], [], ["h1"]]
