"""Fleet memory (pure, the engine against the simulated fleet): a host suspected by three hardware recoveries
within a day is cordoned by the third though its diagnostics pass every time; with `repeat_faults` 0, never."""

from __future__ import annotations

from pathlib import Path

import pytest
from fleet import Fleet, Harness, incident

pytestmark = pytest.mark.pure
JOB = "job-m"


def cordons_per_fault(tmp: Path, **settings: object) -> list[list[str]]:
    h = Harness.build(Fleet(job=JOB, hosts=["h0", "h1", "h2"]), tmp, **settings)
    h.run(lambda: h.training(1))
    out = []
    for n in (1, 2, 3):
        for _ in range(5):  # training a while: the fault's first sign is after the generation started
            h.turn()
        inc = incident(JOB, "h1", strong=False, at=h.now, iid=f"{JOB}/host_fault/h1/{n}")  # weak: diagnosed
        h.feed([inc])
        h.run(lambda iid=inc.incident_id: (c := h.engine.state.cases.get(iid)) is not None and c.outcome is not None)
        assert h.engine.state.cases[inc.incident_id].cls == "hardware"
        assert "diagnose" in h.engine.state.cases[inc.incident_id].plan
        out.append([a.target for a in h.actions(action="cordon", status="succeeded", incident_id=inc.incident_id)
                    if a.target != JOB])
    return out


def test_the_third_fault_within_a_day_cordons_the_host_its_diagnostics_pass(tmp_path: Path) -> None:
    assert cordons_per_fault(tmp_path) == [[], [], ["h1"]]


def test_fleet_memory_off(tmp_path: Path) -> None:
    assert cordons_per_fault(tmp_path, policy_repeat_faults=0) == [[], [], []]
