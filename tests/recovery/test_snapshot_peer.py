"""Restore from a peer's copy: the node agent's copies of a rank under `<snapshot_dir>/peer/<rank>` count on restore.

One process (world of one rank): the copies are put where the agent puts them (written with the training
side's own `SnapshotDir`, as the agent's byte copy of a buddy's snapshot would be).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, RNGState, TrainState
from vigil.recovery.checkpoint.coordination import Topology
from vigil.recovery.checkpoint.memory import Snapshots, choose
from vigil.recovery.checkpoint.snapshot import SnapshotDir

pytestmark = pytest.mark.pure


def cfg(tmp_path: Path, **kw: Any) -> CheckpointConfig:
    return CheckpointConfig(directory=tmp_path / "ckpt", spool_dir=tmp_path / "spool", job_id="job", host="h",
                            snapshot_wait_s=30, snapshot_budget=None, **kw)  # fmt: skip


def job(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer, dict[str, Any]]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, opt, {"train": TrainState(model, opt), "rng": RNGState(), "meta": {"step": 0}}


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, state: dict[str, Any], n: int) -> None:
    opt.zero_grad()
    model(torch.randn(4, 8) * random.random()).pow(2).mean().backward()
    opt.step()
    state["meta"]["step"] = n


def restored(tmp_path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(x) for f in sorted((tmp_path / "spool").rglob("*.jsonl")) for x in f.read_text().splitlines()]
    return [e for e in lines if e["phase"] == "restored"]


def move_to_peer(shm: Path, *, keep_own: bool = False) -> None:
    """What buddy replication leaves on the host that takes over rank 0: its snapshots as peer copies."""
    for snap in (shm / "0").iterdir():
        shutil.copytree(snap, shm / "peer" / "0" / snap.name)
    if not keep_own:
        shutil.rmtree(shm / "0")


def test_a_peer_copy_is_restored_bitwise_and_the_source_is_peer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shm = tmp_path / "host-b" / "job"
    monkeypatch.setenv("VIGIL_SNAPSHOT_DIR", str(shm))  # what `vigil run` sets: this host's memory
    random.seed(1)
    model, opt, state = job()
    with Checkpointer(cfg(tmp_path)) as ckpt:
        for n in range(1, 7):
            step(model, opt, state, n)
            if n == 2:
                assert ckpt.save(n, state) and ckpt.wait(30)
            assert ckpt.snapshot(n, state)
        assert ckpt.snapshots.wait(30)
    assert sorted(p.name[5:15] for p in (shm / "0").iterdir()) == ["0000000005", "0000000006"]
    move_to_peer(shm)  # the rank's own memory is gone (its host was lost); the buddy's copies are here
    model2, opt2, state2 = job(seed=9)
    with Checkpointer(cfg(tmp_path)) as again:
        assert again.snapshots.row(2) == [2, 6, 5, -1, -1]  # own (none) and peer steps, same width everywhere
        assert again.load_latest(state2) == 6
        assert again.last_restore is not None and again.last_restore.source == "peer"
    for n in range(7, 10):
        step(model2, opt2, state2, n)
    random.seed(1)
    model3, opt3, state3 = job()
    for n in range(1, 10):
        step(model3, opt3, state3, n)
    for a, b in zip(model2.state_dict().values(), model3.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert [(e["step"], e["source"]) for e in restored(tmp_path)] == [(6, "peer")]


def test_own_memory_is_preferred_and_an_altered_peer_copy_is_never_loaded(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    model, opt, state = job()
    with Checkpointer(cfg(tmp_path, snapshot_dir=shm)) as ckpt:
        for n in (1, 2):
            step(model, opt, state, n)
            assert ckpt.snapshot(n, state) and ckpt.snapshots.wait(30)
    move_to_peer(shm, keep_own=True)
    with Checkpointer(cfg(tmp_path, snapshot_dir=shm)) as again:
        assert again.load_latest(job(seed=3)[2]) == 2
        assert again.last_restore is not None and again.last_restore.source == "memory"
    # a newer peer copy whose bytes were altered after its marker: refused, the own snapshot of 2 wins
    SnapshotDir(shm / "peer" / "0", rank=0, world_size=1, keep=2).write(3, {"meta": {"step": 3}})
    blob = next(p for p in (shm / "peer" / "0").iterdir() if p.name.startswith("snap-0000000003")) / "state.pt"
    blob.write_bytes(blob.read_bytes()[:-8] + b"tampered")
    fresh = job(seed=4)[2]
    with Checkpointer(cfg(tmp_path, snapshot_dir=shm)) as again:
        assert again.load_latest(fresh) == 2 and fresh["meta"] == {"step": 2}
        assert again.last_restore is not None and again.last_restore.source == "memory"


def test_peer_copies_of_an_abandoned_future_are_removed_on_restore(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    model, opt, state = job()
    with Checkpointer(cfg(tmp_path, snapshot_dir=shm)) as ckpt:
        step(model, opt, state, 1)
        assert ckpt.snapshot(1, state) and ckpt.snapshots.wait(30)
        step(model, opt, state, 2)
        assert ckpt.save(2, state) and ckpt.wait(30)
    SnapshotDir(shm / "peer" / "0", rank=0, world_size=2, keep=2).write(1, {"x": torch.ones(1)})  # another world
    with Checkpointer(cfg(tmp_path, snapshot_dir=shm)) as again:
        assert again.snapshots.row(None) == [-1, 1, -1, -1, -1]  # a copy from a world of 2 ranks is not this rank's
        assert again.load_latest(job(seed=3)[2]) == 2  # the checkpoint is newer
    SnapshotDir(shm / "peer" / "0", rank=0, world_size=1, keep=2).write(5, {"x": torch.ones(1)})
    shutil.rmtree(tmp_path / "ckpt")
    with Checkpointer(cfg(tmp_path, snapshot_dir=shm)) as again:
        again.snapshots.discard_after(1)
        assert [s.step for d, _ in again.snapshots.sources() for s in d.complete()] == [1]


def test_replicated_state_restores_from_any_replica_after_the_world_shrank(tmp_path: Path) -> None:
    """DDP on 3 hosts (6 ranks) restarted on 2 (4 ranks): every rank holds the same state, so any replica's
    snapshot serves; a per-rank state (not replicated) never takes another rank's or another world's."""
    base = tmp_path / "host-1"
    for rank, steps in ((2, (29, 30)), (3, (29, 30))):  # this host's ranks in the world of 6
        for n in steps:
            SnapshotDir(base / str(rank), rank=rank, world_size=6, keep=2).write(n, {"w": torch.full((2,), n)})
    SnapshotDir(base / "peer" / "4", rank=4, world_size=6, keep=2).write(31, {"w": torch.full((2,), 31)})

    def snaps(rank: int, *, replicated: bool) -> Snapshots:
        return Snapshots(base / str(rank), topology=Topology(rank=rank, world_size=4), every=1, keep=2,
                         pin_memory=False, wait_s=0, peer_root=base / "peer" / str(rank), replicated=replicated)

    assert snaps(2, replicated=False).row(20) == [20, -1, -1, -1, -1]  # world 6 is not this world
    r1, r2 = snaps(1, replicated=True), snaps(2, replicated=True)  # rank 1 had no directory here before
    assert r1.row(20) == [20, 31, 30, 29, -1] and r2.row(20) == [20, 31, 30, 29, -1]
    assert choose([r1.row(20), r2.row(20), [-1, 30, 29, -1, -1]]) == 30
    found = r2.find(30)
    assert found is not None and found[0].path.parent.name == "2" and found[2] == "memory"  # its own first
    found = r1.find(30)
    assert found is not None and found[0].path.parent.name == "2" and found[2] == "memory"  # a replica on the host
    found = r1.find(31)
    assert found is not None and found[2] == "peer"
    blob = found[0].path / "state.pt"
    blob.write_bytes(blob.read_bytes()[:-8] + b"tampered")
    assert r1.find(31) is None  # hashed when chosen: an altered replica is never loaded
    # rank 1's own state held for it by a buddy (a lost host's rank 1, now run here): it, not a replica's
    SnapshotDir(base / "peer" / "1", rank=1, world_size=6, keep=2).write(30, {"w": torch.full((2,), 30)})
    found = r1.find(30)
    assert found is not None and found[0].path.parent.name == "1" and found[2] == "peer"
    found = r2.find(30)
    assert found is not None and found[0].path.parent.name == "2" and found[2] == "memory"  # its own still first
