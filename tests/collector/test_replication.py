"""Buddy replication of in-memory snapshots by the node agent: ring, bounds, digests, staging for a new world.

The snapshots are written by the training side's own `SnapshotDir` (the real format); the agent side
reads them as bytes and a JSON marker.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from vigil.collector.control.buddies import LocalTransport, MemoryTransport
from vigil.collector.control.replicas import PEER, HostStore, Refused, read
from vigil.collector.control.replication import Replicator, buddy_of, local_ranks
from vigil.collector.control.torchrun import nproc_per_node
from vigil.contract import World
from vigil.recovery.checkpoint.snapshot import SnapshotDir

pytestmark = pytest.mark.pure
MB = 1 << 20


def world(hosts: list[str], node_rank: int) -> World:
    return World(generation=1, hosts=hosts, node_rank=node_rank, master_addr="127.0.0.1", master_port=29500)


def store(root: Path, host: str, **kw: int) -> HostStore:
    return HostStore(root / host / "job", keep=kw.get("keep", 2), max_rank_bytes=kw.get("max_rank", MB),
                     max_host_bytes=kw.get("max_host", 4 * MB))  # fmt: skip


def snap(root: Path, host: str, rank: int, step: int, *, numel: int = 16, world_size: int = 3) -> None:
    SnapshotDir(root / host / "job" / str(rank), rank=rank, world_size=world_size, keep=2).write(
        step, {"w": torch.full((numel,), float(step))})


def peer_steps(root: Path, host: str, rank: int) -> list[int]:
    return [h.step for h in store(root, host).held(rank, own=False)]


def test_the_ring_and_the_ranks_of_a_host() -> None:
    assert buddy_of(world(["h0", "h1", "h2"], 2)) == "h0" and buddy_of(world(["h0", "h1", "h2"], 0)) == "h1"
    assert buddy_of(world(["h0"], 0)) is None
    assert local_ranks(world(["h0", "h1"], 1), 4) == [4, 5, 6, 7]
    assert nproc_per_node(["python", "-m", "torch.distributed.run", "--nproc-per-node", "3", "t.py"]) == 3
    assert nproc_per_node(["torchrun", "--nproc_per_node=2", "t.py"]) == 2
    assert nproc_per_node(["torchrun", "--nproc-per-node", "gpu", "t.py"]) == 1
    assert nproc_per_node(["python", "t.py", "--nproc-per-node", "5"]) == 1


def test_new_snapshots_go_to_the_next_host_in_the_ring_once_each(tmp_path: Path) -> None:
    transport = MemoryTransport()
    rep = Replicator(store(tmp_path, "h2"), transport, host="h2")
    assert rep.tick() == 0  # no world yet: no buddy
    rep.follow(world(["h0", "h1", "h2"], 2), 1)
    snap(tmp_path, "h2", 2, 7)
    snap(tmp_path, "h2", 2, 8)
    assert rep.tick() == 2 and rep.tick() == 0
    assert [h.step for h in transport.offers("h0", 2)] == [8, 7] and transport.offers("h1", 2) == []
    snap(tmp_path, "h2", 2, 9)  # the rank keeps 2: step 7 is gone on h2
    assert rep.tick() == 1 and rep.stats.pushed == 3
    assert transport.offers("h0", 2)[0].step == 9


def test_the_buddy_keeps_k_per_rank_and_a_step_replaces_its_abandoned_future(tmp_path: Path) -> None:
    rep = Replicator(store(tmp_path, "h0"), LocalTransport(store_of=lambda h: store(tmp_path, h)), host="h0")
    rep.follow(world(["h0", "h1"], 0), 1)
    for step in (3, 4, 5):
        snap(tmp_path, "h0", 0, step)
        rep.tick()
    assert peer_steps(tmp_path, "h1", 0) == [5, 4]
    # the job restarted from step 3 elsewhere and reaches step 4 again: its new step 4 replaces the copies of 4 and 5 (an abandoned future)
    for held in store(tmp_path, "h0").held(0):
        shutil.rmtree(held.path)
    snap(tmp_path, "h0", 0, 4)
    assert rep.tick() == 1
    kept = store(tmp_path, "h1").held(0, own=False)
    assert [h.step for h in kept] == [4]
    loaded = SnapshotDir(kept[0].path.parent, rank=0, world_size=3, keep=2)
    assert loaded.held() and float(loaded.load(loaded.held()[0])["w"][0]) == 4.0  # a verified, loadable copy


def test_bounds_refuse_and_count_and_nothing_lands(tmp_path: Path) -> None:
    rep = Replicator(store(tmp_path, "h0"),
                     LocalTransport(store_of=lambda h: store(tmp_path, h, max_rank=64 * 1024, max_host=100 * 1024)),
                     host="h0")  # fmt: skip
    rep.follow(world(["h0", "h1"], 0), 2)
    snap(tmp_path, "h0", 0, 1, numel=32 * 1024)  # 128 KiB of float32: above the per-rank bound
    assert rep.tick() == 0 and rep.stats.refused[Refused.TOO_LARGE] == 1
    snap(tmp_path, "h0", 1, 1, numel=10 * 1024)  # 40 KiB each: two fit the host's 100 KiB, a third does not
    snap(tmp_path, "h0", 1, 2, numel=10 * 1024)
    assert rep.tick() == 2
    rep.follow(world(["h0", "h1"], 0), 3)
    snap(tmp_path, "h0", 2, 1, numel=10 * 1024)
    assert rep.tick() == 0 and rep.stats.refused[Refused.HOST_FULL] == 1
    assert rep.tick() == 0 and rep.stats.refused[Refused.HOST_FULL] == 1  # refused for good, not retried
    assert store(tmp_path, "h1").peer_ranks() == [1] and store(tmp_path, "h1").peer_bytes() <= 100 * 1024


def test_altered_bytes_or_marker_never_land(tmp_path: Path) -> None:
    rep = Replicator(store(tmp_path, "h0"), LocalTransport(store_of=lambda h: store(tmp_path, h)), host="h0")
    rep.follow(world(["h0", "h1"], 0), 1)
    snap(tmp_path, "h0", 0, 1)
    held = store(tmp_path, "h0").held(0)[0]
    data = bytearray((held.path / "state.pt").read_bytes())
    data[-40] ^= 0xFF
    (held.path / "state.pt").write_bytes(bytes(data))  # same size, other bytes: the marker's sha256 no longer fits
    assert rep.tick() == 0 and rep.stats.refused[Refused.DIGEST] == 1
    snap(tmp_path, "h0", 0, 2)
    other = store(tmp_path, "h0").held(0)[0]
    doc = json.loads((other.path / "_COMMITTED").read_bytes())
    (other.path / "_COMMITTED").write_text(json.dumps({**doc, "step": 99}))  # claims another step than its name
    assert read(other.path) is None and rep.tick() == 0
    assert not (tmp_path / "h1" / "job" / PEER / "0").exists() or peer_steps(tmp_path, "h1", 0) == []


def test_a_new_world_stages_a_moved_ranks_snapshots_from_its_hosts_only(tmp_path: Path) -> None:
    # generation 1 on h0, h1, h2 (rank = node rank), each replicating to the next host in the ring
    old = ["h0", "h1", "h2"]
    reps = {h: Replicator(store(tmp_path, h), LocalTransport(store_of=lambda x: store(tmp_path, x)), host=h)
            for h in (*old, "h3")}  # fmt: skip
    for r, h in enumerate(old):
        reps[h].follow(world(old, r), 1)
        for step in (13, 14):
            snap(tmp_path, h, r, step)
        reps[h].tick()
    snap(tmp_path, "h1", 2, 20)  # h1 is lost: nothing it holds may be used (this one would win if it were)
    # generation 2 without h1: h2 runs rank 1 (its peer copies from h1 have it), the spare h3 rank 2
    new = ["h0", "h2", "h3"]
    assert reps["h2"].stage(world(new, 1), 1) == 0  # it holds rank 1's copies already
    assert reps["h3"].stage(world(new, 2), 1) == 2
    assert peer_steps(tmp_path, "h3", 2) == [14, 13]
    assert reps["h3"].stage(world(new, 2), 1) == 0  # held now: nothing to fetch
    assert [h.step for h in store(tmp_path, "h2").held(1)] == [14, 13]
    reps["h2"].follow(world(new, 1), 1)
    reps["h2"].settled()  # the new world trains: h2's own snapshots of rank 2 are not needed any more
    assert store(tmp_path, "h2").own_ranks() == []


def test_symlinks_planted_by_the_training_side_are_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "agent-only.txt"
    secret.write_bytes(b"a file of the host the ranks must not get copied to them")
    rep = Replicator(store(tmp_path, "h0"), LocalTransport(store_of=lambda h: store(tmp_path, h)), host="h0")
    rep.follow(world(["h0", "h1"], 0), 1)
    snap(tmp_path, "h0", 0, 1)
    held = store(tmp_path, "h0").held(0)[0]
    (held.path / "state.pt").unlink()
    (held.path / "state.pt").symlink_to(secret)  # the marker lists it; the file is another one
    assert rep.tick() == 0 and store(tmp_path, "h0").held(0) == []  # not even listed
    # a peer directory on the buddy that points elsewhere: nothing is written through it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "h1" / "job").mkdir(parents=True)
    (tmp_path / "h1" / "job" / PEER).symlink_to(elsewhere)
    snap(tmp_path, "h0", 0, 2)
    assert rep.tick() == 0 and rep.stats.refused[Refused.IO] == 1
    assert list(elsewhere.iterdir()) == []
