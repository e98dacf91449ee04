"""A `member` report dated ahead (23 h) is refused by the contract (more than
VIGIL_CONTRACT_CLOCK_SKEW_S ahead); and should one reach the controller's fold anyway (a larger
skew setting, a record folded from elsewhere), it does not override the real agent's reports nor look
alive for hours: the fold orders a host's members by the log and clamps producer times that are ahead
of its own clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.contract import Member
from vigil.recovery.controller.plan import alive
from vigil.recovery.controller.state import MEMBER_SKEW, ClusterState

pytestmark = pytest.mark.pure
NOW = datetime.now(UTC)


def member(ts: datetime, ip: str, **kw: Any) -> Member:
    return Member(job_id="job-a", host="node-1", ts=ts, state="waiting", nodes_min=1, nodes_max=2, ip=ip,
                  ports=[29500], **kw)


def forged_member(ts: datetime, ip: str, **kw: Any) -> Member:
    """What the fold would see if a far-future member got past the contract."""
    with pytest.raises(ValueError, match="out of range"):
        member(ts, ip, **kw)
    honest = member(NOW, ip)
    return honest.model_copy(update={"ts": ts, "event_id": f"forged-{ts.timestamp()}", **kw})


def test_a_future_dated_member_does_not_override_later_reports_in_the_log() -> None:
    state = ClusterState(clock=lambda: NOW)
    forged = forged_member(NOW + timedelta(hours=23), "6.6.6.6", since=NOW + timedelta(hours=23))
    real = member(NOW + timedelta(seconds=2), "10.0.0.1")
    state.apply([forged, real])
    held = state.jobs["job-a"].members["node-1"]
    assert held.ip == "10.0.0.1" and held.event_id == real.event_id


def test_a_future_dated_member_is_clamped_and_goes_stale() -> None:
    state = ClusterState(clock=lambda: NOW)
    state.apply([forged_member(NOW + timedelta(hours=23), "6.6.6.6", since=NOW + timedelta(hours=23))])
    held = state.jobs["job-a"].members["node-1"]
    assert held.ts == NOW + MEMBER_SKEW and held.since == NOW + MEMBER_SKEW
    assert not alive(held, NOW + MEMBER_SKEW + timedelta(seconds=61), 60.0)


def test_an_honest_member_keeps_its_times() -> None:
    state = ClusterState(clock=lambda: NOW)
    honest = member(NOW + timedelta(seconds=30), "10.0.0.1")  # a little clock skew is fine
    state.apply([honest])
    assert state.jobs["job-a"].members["node-1"] == honest
