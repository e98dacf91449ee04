"""A refusal flood stays bounded: one alert per fingerprint, one for a flood of new ones, old ones forgotten."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from vigil.signing.refusals import FLOOD, REMEMBERED, Refusal, Refusals
from vigil.signing.seal import Problem

pytestmark = pytest.mark.pure
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _forged(job: str) -> Refusal:
    return Refusal(what="incident", problem=Problem.UNSIGNED, detail="", job_id=job, host="h", event_id="e" * 8)


def test_thousands_of_forged_jobs_raise_one_flood_alert_a_minute_and_refusals_are_never_silent_for_good() -> None:
    r = Refusals(reporter="controller")
    first = [r.refuse(_forged(f"j{i}"), T0 + timedelta(seconds=i * 50 / 10_000)) for i in range(10_000)]
    alerts = [a for a in first if a is not None]
    assert len(alerts) == FLOOD + 1 and r.count == 10_000
    flood = alerts[-1]
    assert flood.fingerprint == "security/controller/flood" and flood.subject == "flood"
    assert all(a.subject == "incident" for a in alerts[:-1])
    assert r.refuse(_forged("j9999"), T0 + timedelta(seconds=55)) is None  # remembered: counted, not raised again
    assert r.seen("security/controller/incident/j9999") == 2
    assert r.seen("security/controller/incident/j0") == 0  # forgotten: at most REMEMBERED kept
    assert len(r._alerted) == REMEMBERED
    later = r.refuse(_forged("j0"), T0 + timedelta(minutes=2))  # the budget is a minute's, not for ever
    assert later is not None and later.fingerprint == "security/controller/incident/j0"
