"""The replica-digest vote (pure): the odd replica named by majority, ties unblamed, no verdict on data in flight."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.analyzer.detect.replicas import vote

pytestmark = pytest.mark.pure
T0 = datetime(2026, 12, 7, tzinfo=UTC)


def rows(digests: dict[int, dict[int, int]], tp_of: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """step -> rank -> digest as the detector reads them."""
    tp_of = tp_of or {}
    return [{"step": s, "rank": r, "host": f"h{r}", "pp": 0, "tp": tp_of.get(r, 0), "digest": d,
             "ts": T0 + timedelta(seconds=s)} for s, got in digests.items() for r, d in got.items()]


def reach(ranks: range, step: int, tp_of: dict[int, int] | None = None) -> dict[int, tuple[int, int, int]]:
    return {r: (0, (tp_of or {}).get(r, 0), step) for r in ranks}


def test_healthy_replicas_give_nothing() -> None:
    assert vote(rows({0: dict.fromkeys(range(4), 7), 5: dict.fromkeys(range(4), -9)}), reach(range(4), 9), 2) == []


def test_the_odd_replica_is_named_with_its_host_and_first_step_and_kept_when_the_window_moves() -> None:
    digests = {0: dict.fromkeys(range(4), 1), 5: {0: 2, 1: 2, 2: 3, 3: 2}, 10: {0: 4, 1: 4, 2: 5, 3: 4}}
    first: dict[int, int] = {}
    [f] = vote(rows(digests), reach(range(4), 10), 2, first)
    assert (f.alert, f.subject, f.host, f.severity) == ("replica_mismatch", "h2/rank2", "h2", "error")
    assert f.evidence["step"] == 5 and f.evidence["votes"] == 3 and f.evidence["replicas"] == 4
    assert f.evidence["good_step"] == 0  # the replay starts from a snapshot at or before it
    [later] = vote(rows({10: digests[10]}), reach(range(4), 10), 2, first)  # step 5 left the window
    assert later.evidence["step"] == 5 and later.evidence["last_step"] == 10


def test_no_verdict_while_a_replica_has_not_reported_past_the_step() -> None:
    digests = {5: {0: 2, 1: 2, 2: 3}}  # rank 3's record of step 5 is in flight
    assert vote(rows(digests), {**reach(range(3), 5), 3: (0, 0, 4)}, 2) == []
    [f] = vote(rows(digests), {**reach(range(3), 5), 3: (0, 0, 6)}, 2)  # past it without a digest: lost, 2 of 3
    assert f.host == "h2" and f.evidence["replicas"] == 3


def test_a_tie_or_two_replicas_is_reported_and_blames_no_one() -> None:
    for digests in ({5: {0: 1, 1: 1, 2: 2, 3: 2}}, {5: {0: 1, 1: 2}}, {5: {0: 1, 1: 2, 2: 3}}):
        n = len(digests[5])
        [f] = vote(rows(digests), reach(range(n), 5), 2)
        assert (f.host, f.severity, f.subject) == ("*", "warning", "pp0/tp0") and "no replica is blamed" in f.summary
        assert f.evidence["majority"] is None


def test_replicas_are_those_of_the_same_pp_tp_coordinates() -> None:
    tp_of = {0: 0, 1: 1, 2: 0, 3: 1, 4: 0, 5: 1}  # two shards (tp 0, tp 1), three replicas each: digests differ by tp
    digests = {5: {0: 10, 2: 10, 4: 10, 1: 20, 3: 21, 5: 20}}
    [f] = vote(rows(digests, tp_of), reach(range(6), 5, tp_of), 2)
    assert f.host == "h3" and f.evidence["tp"] == 1


def test_a_named_replica_is_an_sdc_incident_and_a_tie_is_none() -> None:
    from vigil.analyzer.incidents.build import build
    from vigil.analyzer.settings import IncidentSettings
    from vigil.contract import IncidentCategory

    [named] = vote(rows({5: {0: 2, 1: 2, 2: 3, 3: 2}}), reach(range(4), 5), 2)
    [tie] = vote(rows({5: {0: 1, 1: 1, 2: 2, 3: 2}}), reach(range(4), 5), 2)
    [draft] = build([named, tie], T0 + timedelta(seconds=9), IncidentSettings()).drafts
    assert draft.category is IncidentCategory.SILENT_DATA_CORRUPTION and draft.cause == "unknown"
    assert [(p.host, p.rank) for p in draft.culprits] == [("h2", 2)] and draft.evidence["step"] == 5
    assert draft.evidence["fault_classes"] == ["sdc"]  # what fleet memory counts against h2


def test_a_rank_claimed_from_two_hosts_is_left_out_of_the_vote() -> None:
    """Digests are the job's claims: records of ranks 2 and 3 sent from h0 as well as from their own
    hosts) do not outvote rank 1 on h1, nor does a step's record that names two digests."""
    digests = {5: {0: 2, 1: 3, 2: 2, 3: 2}}
    forged = rows(digests) + [{**r, "host": "h0"} for r in rows(digests) if r["rank"] in (2, 3)]
    [tie] = vote(forged, reach(range(4), 5), 2)  # 0 and 1 left: two replicas, no majority, no one blamed
    assert tie.host == "*" and tie.severity == "warning"
    doubled = [{**r, "digests": 2} if r["rank"] == 3 else r for r in rows({5: {0: 2, 1: 2, 2: 2, 3: 9}})]
    assert vote(doubled, reach(range(4), 5), 2) == []  # rank 3 out: 0, 1, 2 agree
    [f] = vote(rows({5: {0: 2, 1: 2, 2: 2, 3: 9}}), reach(range(4), 5), 2)  # the same, claimed once: named
    assert f.subject == "h3/rank3"
