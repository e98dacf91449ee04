"""Executed operator request ids outlive the state's retention: kept for the topic's (`Retention.keep_request_ids`).

A done request is dropped from the controller's state after `keep` (1 day), its id kept: a signed copy of it
re-published while the topic still holds it (last week's `uncordon`) is never pending again, whatever the
request expiry. After `keep_request_ids` the id goes too (bounded memory; the topic no longer holds the request)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from vigil.contract import RecoveryAction
from vigil.recovery.controller.compaction import Retention
from vigil.recovery.controller.state import ClusterState

pytestmark = pytest.mark.pure
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def request(status: str, ts: datetime) -> RecoveryAction:
    return RecoveryAction(job_id="j", host="dashboard", ts=ts, action="uncordon", target="h1", status=status,
                          command_id="request/abc", actor="dashboard:alice")  # type: ignore[arg-type]


def test_a_done_request_forgotten_by_compaction_is_never_pending_again() -> None:
    state = ClusterState(retention=Retention(keep=timedelta(days=1), keep_request_ids=timedelta(days=7)))
    planned = request("planned", T0)
    state.apply([planned])
    assert [r.command_id for r in state.pending_requests()] == ["request/abc"]
    state.apply([request("succeeded", T0 + timedelta(seconds=5))])
    state.compact(T0 + timedelta(days=2))
    assert state.requests == {} and "request/abc" in state.executed
    state.apply([planned])  # the same signed request, re-published two days later
    assert state.pending_requests() == []
    state.compact(T0 + timedelta(days=8))  # past the topic's retention: the id goes too
    assert state.executed == {}
