"""A recovery story for the Recovery page, told by the real controller engine against a simulated fleet.

Three hosts train; h2 gets a hardware incident (Xid); the engine pauses, diagnoses, cordons h2 and
restarts on h0 and h1 from the checkpoint at step 10 (tests/support/fleet.py drives it in simulated
seconds, no broker). `story()` returns everything that would be on the `recovery` topic — the
controller's actions, commands and outcomes, the agents' member reports and checkpoints — plus the
engine's folded state, so a test can compare what the dashboard computes from ClickHouse with what
the controller itself says.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.fleet import Fleet, Harness, incident
from vigil.contract import Event, SnapshotReplication
from vigil.contract.control import RefusedCopy

JOB = "rec-job"
CULPRIT = "h2"


@dataclass(frozen=True)
class Story:
    events: list[Event]
    state: Any  # vigil.recovery.controller.state.ClusterState
    incident_id: str
    now: Any


def story(tmp: Path) -> Story:
    fleet = Fleet(job=JOB, hosts=["h0", "h1", CULPRIT])
    h = Harness.build(fleet, tmp, policy_diagnose_explicit=True)  # every step a hardware recovery can take, shown
    h.run(lambda: h.training(1))
    for _ in range(15):
        h.turn()
    inc = incident(JOB, CULPRIT, at=h.now)
    h.feed(fleet.commit(10, h.now) + fleet.crash(CULPRIT, h.now) + [inc])
    h.run(lambda: h.training(2))
    for _ in range(10):
        h.turn()
    held = fleet.members["h0"]  # its latest report carries its snapshot replication (collector.control.replication)
    fleet.member("h0", held.state, h.now, replication=SnapshotReplication(
        buddy="h1", pushed=12, pushed_bytes=3 << 20, last_step=12, refused={RefusedCopy.IO: 1}))
    events = [*h.fx.events, *fleet.members.values()]
    return Story(events=events, state=h.engine.state, incident_id=inc.incident_id, now=h.now)


def load(client: Any, events: list[Event]) -> None:
    """Write the events through the analyzer's own ingest path (processors + writer)."""
    from vigil.analyzer.ingest.writer import ClickHouseWriter

    assert ClickHouseWriter(client=client).write(events) == []
