"""Conditions on a live recovery setup: an incident to publish, a job training again, a host cordoned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.live import Live
from vigil.contract import Incident, RankRef
from vigil.cordons import CordonRegistry
from vigil.recovery.controller.state import ClusterState


def incident(job: str, host: str, *, category: str = "host_fault", cause: str = "hardware", strong: bool = True,
             tag: str = "") -> Incident:
    now = datetime.now(UTC)
    return Incident(job_id=job, host=host, incident_id=f"{job}/{category}/{host}/{tag or now.strftime('%H%M%S%f')}",
                    category=category, cause=cause, status="open", severity="critical",  # type: ignore[arg-type]
                    summary=f"{host}: {category}", culprits=[RankRef(host=host, rank=0, message="test fault")],
                    confidence="strong" if strong else "weak", first_sign=now - timedelta(seconds=1), detected=now)


def training(job: str, generation: int, hosts: int) -> object:
    def check(s: ClusterState) -> bool:
        j = s.jobs.get(job)
        return j is not None and j.generation == generation and len(j.world) == hosts and all(
            (m := j.members.get(h)) is not None and m.generation == generation and m.state == "training"
            for h in j.world)
    return check


def cordoned(live: Live) -> set[str]:
    return set(CordonRegistry(live.home / "cordons.json").read())
