"""The controller cites the resource advisor's latest advice in its start and scale decisions (pure).

The advice arrives like any event on the `recovery` topic; the controller folds the newest one per
job and writes into each plan what it recommended against the plan's node count. It does not obey:
a scale-up beyond the recommendation still happens, and says so.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.fleet import Fleet, Harness
from vigil.contract import Advice, AdvicePoint, AdviceScore

pytestmark = pytest.mark.pure
JOB = "job-adv"


def advice(h: Harness, aid: str, nodes: int, *, ago_s: float = 0.0) -> Advice:
    return Advice(job_id=JOB, host="advisor", ts=h.now - timedelta(seconds=ago_s), advice_id=aid, nodes=nodes,
                  current=2, predicted=1000.0 * nodes, curve=[AdvicePoint(nodes=n, throughput=1000.0 * n, steps=10)
                                                             for n in (1, 2)],
                  scored=AdviceScore(advice_id="older", advised_at=h.now - timedelta(hours=1), nodes=2,
                                     predicted=2000.0, measured=1900.0, error_pct=-5.0))


def test_start_and_scale_up_plans_cite_the_newest_advice(tmp_path: Path) -> None:
    fleet = Fleet(job=JOB, hosts=["h0", "h1"], nodes=(2, 3, 1))
    h = Harness.build(fleet, tmp_path, policy_scale_up=True, policy_scale_up_wait_s=0)
    new = advice(h, "a-new", 2)
    h.feed([new, advice(h, "a-old", 3, ago_s=60)])  # the newer one wins, in any order
    h.run(lambda: h.training(1))
    (start,) = h.actions(action="plan", incident_id=f"{JOB}/start/g1")
    assert start.details["advice"] == {"advice_id": "a-new", "recommended_nodes": 2, "predicted_throughput": 2000.0,
                                       "advised_at": new.ts.isoformat(), "previous_error_pct": -5.0,
                                       "plan_nodes": 2, "versus": "at"}
    assert "advice a-new recommends 2 nodes (this plan: 2, at it)" in start.reason

    fleet.hosts.append("h2")
    h.feed([fleet.member("h2", "waiting", h.now)])
    h.run(lambda: h.training(2))
    (scale,) = h.actions(action="plan", incident_id=f"{JOB}/scale/g1")
    assert scale.details["class"] == "scale" and scale.details["advice"]["versus"] == "above"
    assert "advice a-new recommends 2 nodes (this plan: 3, above it)" in scale.reason
    assert sorted(h.engine.state.job(JOB).world) == ["h0", "h1", "h2"]  # cited, not obeyed


def test_without_advice_a_plan_cites_nothing(tmp_path: Path) -> None:
    h = Harness.build(Fleet(job=JOB, hosts=["h0", "h1"]), tmp_path)
    h.run(lambda: h.training(1))
    (start,) = h.actions(action="plan", incident_id=f"{JOB}/start/g1")
    assert "advice" not in start.details and "advice" not in start.reason
