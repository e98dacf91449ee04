"""The recent-id window: what it can vouch for, and what it must leave to the exact look-up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from vigil.analyzer.ingest.recent import RecentIds

pytestmark = [pytest.mark.pure]
T0 = datetime(2026, 11, 1, 12, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def test_the_window_vouches_for_recent_events_of_a_host_and_forgets_old_ones() -> None:
    w = RecentIds(window_s=60)
    for s in range(120):
        w.add("j", "h1", at(s), f"e{s}")
    w.evict()
    assert w.covered("j", "h1", at(100)) and w.seen("e100")
    assert not w.covered("j", "h1", at(30)), "older than newest - window: look it up"
    assert not w.seen("e30"), "evicted"
    assert w.covered("j", "h1", at(119)) and not w.seen("e-new")
    assert len(w) <= 61


def test_hosts_keep_their_own_clock() -> None:
    """A partition that lags (host h2 replaying from its start) is still judged in memory."""
    w = RecentIds(window_s=60)
    for s in range(300):
        w.add("j", "h1", at(s), f"a{s}")
    assert w.covered("j", "h2", at(0))
    w.add("j", "h2", at(0), "b0")
    assert w.covered("j", "h2", at(0)) and w.seen("b0")


def test_events_stored_before_the_process_started_are_never_vouched_for() -> None:
    w = RecentIds(window_s=60)
    w.started_after({("j", "h1"): at(100)})
    assert not w.covered("j", "h1", at(90)) and not w.covered("j", "h1", at(100))
    assert w.covered("j", "h1", at(101)) and w.covered("j", "h9", at(0))
