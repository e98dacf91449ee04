"""The agent's snapshot replication counters as the contract carries them (`member.replication`).

`Replicator.report()` turns the counters into a `SnapshotReplication`: copies pushed and staged, their
bytes, refusals by reason, the newest step the buddy holds. The contract field is bounded (known
refusal reasons only, unsigned counts) and every reason the agent can count is one it accepts. That
they reach the event log from live agents is checked by test_snapshot_peer_live.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from vigil.collector.control.buddies import LocalTransport
from vigil.collector.control.replicas import HostStore, Refused
from vigil.collector.control.replication import Replicator
from vigil.contract import Member, SnapshotReplication, World
from vigil.contract.control import RefusedCopy
from vigil.recovery.checkpoint.snapshot import SnapshotDir

pytestmark = pytest.mark.pure


def store(root: Path, host: str, max_rank: int = 1 << 20) -> HostStore:
    return HostStore(root / host / "job", keep=2, max_rank_bytes=max_rank, max_host_bytes=4 << 20)


def world(hosts: list[str], node_rank: int) -> World:
    return World(generation=1, hosts=hosts, node_rank=node_rank, master_addr="127.0.0.1", master_port=29500)


def test_pushes_stages_bytes_refusals_and_the_last_step_replicated_are_reported(tmp_path: Path) -> None:
    def write(host: str, step: int, numel: int = 64) -> None:
        SnapshotDir(tmp_path / host / "job" / "0", rank=0, world_size=2, keep=2).write(step, {"w": torch.ones(numel)})

    transport = LocalTransport(store_of=lambda h: store(tmp_path, h))
    rep = Replicator(store(tmp_path, "h0"), transport, host="h0")
    assert rep.report() == SnapshotReplication()  # nothing yet, no buddy
    rep.follow(world(["h0", "h1"], 0), 1)
    write("h0", 7)
    write("h0", 8)
    assert rep.tick() == 2
    sizes = sorted(h.size for h in store(tmp_path, "h1").held(0, own=False))
    r = rep.report()
    assert (r.buddy, r.pushed, r.pushed_bytes, r.last_step, r.refused) == ("h1", 2, sum(sizes), 8, {})

    spare = Replicator(store(tmp_path, "h2"), transport, host="h2")  # takes h0's place: stages rank 0 from h1
    assert spare.stage(world(["h2", "h1"], 0), 1) == 2
    s = spare.report()
    assert (s.staged, s.staged_bytes, s.pushed, s.last_step) == (2, sum(sizes), 0, None)

    small = Replicator(store(tmp_path, "h3"), LocalTransport(store_of=lambda h: store(tmp_path, h, max_rank=64)),
                       host="h3")  # fmt: skip
    small.follow(world(["h3", "h4"], 0), 1)
    SnapshotDir(tmp_path / "h3" / "job" / "0", rank=0, world_size=2, keep=2).write(9, {"w": torch.ones(4096)})
    assert small.tick() == 0
    assert small.report().refused == {"too_large": 1}
    member = Member(job_id="j", host="h3", state="training", replication=small.report())
    assert Member.model_validate_json(member.model_dump_json()).replication == small.report()


def test_the_contract_accepts_every_reason_the_agent_counts_and_nothing_else() -> None:
    assert Refused is RefusedCopy  # one closed set of reasons, the contract's
    with pytest.raises(ValidationError):
        SnapshotReplication(refused={"anything": 1})  # type: ignore[dict-item]
    with pytest.raises(ValidationError):
        SnapshotReplication(pushed=-1)
    with pytest.raises(ValidationError):
        SnapshotReplication(pushed=1, extra=2)  # type: ignore[call-arg]


def test_recovery_status_shows_each_hosts_replication() -> None:
    from datetime import UTC, datetime

    from vigil.recovery.controller.report import format_status, status
    from vigil.recovery.controller.state import ClusterState

    now = datetime.now(UTC)
    rep = SnapshotReplication(buddy="h1", pushed=20, pushed_bytes=3 << 20, last_step=14, refused={"host_full": 1})
    state = ClusterState()
    state.apply([Member(job_id="j", host="h0", ts=now, state="training", replication=rep),
                 Member(job_id="j", host="h1", ts=now, state="training")])  # fmt: skip
    doc = status(state, now, {})
    assert doc["jobs"]["j"]["members"]["h0"]["replication"] == rep.model_dump()
    assert doc["jobs"]["j"]["members"]["h1"]["replication"] is None
    text = format_status(doc)
    assert "snapshots: to h1 up to step 14 (pushed 20, 3.0 MiB; staged 0, 0.0 MiB; refused host_full 1)" in text
    assert text.count("snapshots:") == 1
