"""One rank of a real multi-process (gloo, CPU) job for the checkpoint tests.

    python ckpt_worker.py SCENARIO RANK WORLD PORT WORKDIR [LAYOUT]

Scenarios (results go to WORKDIR as JSON / torch files the test reads):

* ``ddp_save``: 4-rank DDP + Adam, trains steps 1..5, saves step 5, trains 6..8 while
  step 5 is persisted in the background.
* ``ddp_resume``: a fresh model and optimizer, `load_latest`, `settle_ddp`, trains on to step 8.
* ``ddp_resume_unsettled``: the same without `settle_ddp` (DDP's first iteration sums in its construction
  bucket order: the last bits differ from the uninterrupted run's).
* ``kill_mid_persist``: saves step 10, then step 20 into storage that blocks after the
  first bytes; says so in WORKDIR and waits to be SIGKILLed.
* ``reads``: 4 ranks as DP=2 x TP=2; saves a known state, scrambles it and restores it
  with an instrumented reader, then again without DP groups. LAYOUT ``mesh``: a 2x2
  DeviceMesh, DTensors sharded over tp and replicated over dp, the DP group from the
  mesh; ``lists``: plain tensors, one TP-like shard per tp rank under its own key, the
  DP groups given as rank lists.
* ``disk_full``: the disk fills up under rank 1 while saving step 2; training goes on and
  step 4 is saved.
* ``snapshot_interval``: rank 0 holds a tiny state, rank 1 32 MiB, 20 ms steps, a snapshot call
  every step under `snapshot_budget` 0.03; a save at step 6 sets the interval both then use.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.nn.parallel import DistributedDataParallel

from tests.recovery.storage_fakes import (
    CountingReader,
    ReadCount,
    disk_full_after,
    gated_writer,
    touch_then_block_forever,
)
from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, TrainState, settle_ddp

STEPS = 8
SAVE_AT = 5


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, rank: int, step: int) -> None:
    g = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def snapshot(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    msd, osd = get_state_dict(model, opt)
    return {"model": {k: v.clone() for k, v in msd.items()}, "optim": osd}


def config(work: Path, **kw: Any) -> CheckpointConfig:
    return CheckpointConfig(directory=work / "ckpt", spool_dir=work / "spool", collective_timeout_s=60, **kw)


def ddp(rank: int, work: Path, resume: bool, settle: bool = True) -> None:
    model = DistributedDataParallel(make_model(999 if resume else 0))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    state = {"train": TrainState(model, opt), "meta": {"seen": 0}}
    count = ReadCount()
    ckpt = Checkpointer(
        config(work, dp_group="world", storage_reader_factory=lambda p: CountingReader(p, count))
    )
    start, saved, loaded_meta = 1, None, None
    if resume:
        loaded = ckpt.load_latest(state)
        loaded_meta = dict(state["meta"])
        assert loaded is not None and ckpt.last_restore is not None
        start = loaded + 1
        if rank == 0:
            torch.save(snapshot(model, opt), work / "loaded.pt")
        if settle:  # the new DDP's first iteration, without effect: its buckets as the uninterrupted run's
            settle_ddp(model, torch.zeros(8, 16))
    for step in range(start, STEPS + 1):
        train_step(model, opt, rank, step)
        state["meta"]["seen"] = step
        if step == SAVE_AT and not resume:
            saved = ckpt.save(step, state)
            if rank == 0:  # what save() staged; training goes on below while it is persisted
                torch.save(snapshot(model, opt), work / "at-save.pt")
    if rank == 0:
        torch.save(snapshot(model, opt), work / ("end.pt" if not resume else "end-resumed.pt" if settle
                                                 else "end-unsettled.pt"))
    ckpt.close()
    report(work, rank, saved=saved, meta=state["meta"], stats=dataclasses.asdict(ckpt.stats()),
           loaded_meta=loaded_meta, reads=dataclasses.asdict(count), read_storage=ckpt.last_restore.read_storage if resume else None)  # fmt: skip


def kill_mid_persist(rank: int, work: Path) -> None:
    stuck = {"on": False}

    def writer(path: str) -> Any:
        if stuck["on"]:
            return gated_writer(path, touch_then_block_forever(work / f"persisting-rank{rank}"))
        return gated_writer(path, lambda raw, n: None)

    model = DistributedDataParallel(make_model(0))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    state = {"train": TrainState(model, opt)}
    ckpt = Checkpointer(config(work, dp_group="world", storage_writer_factory=writer))
    for step in range(1, 21):
        train_step(model, opt, rank, step)
        if step == 10:
            assert ckpt.save(step, state) and ckpt.wait(60) and ckpt.stats().persisted == 1, ckpt.last_error
            if rank == 0:
                torch.save(snapshot(model, opt), work / "at-10.pt")
            stuck["on"] = True
        if step == 20:
            assert ckpt.save(step, state)
            (work / f"staged-20-rank{rank}").touch()
    threading.Event().wait()  # persisting step 20 never ends: the test SIGKILLs this process


def reads(rank: int, work: Path, layout: str) -> None:
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    def full(i: int, n: int) -> torch.Tensor:
        return torch.arange(n * 64, dtype=torch.float32).reshape(n, 64) * (i + 1)

    if layout == "mesh":  # DTensors sharded over tp, replicated over dp; the DP group from the mesh
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        tensors: dict[str, Any] = {
            f"w{i}": distribute_tensor(full(i, 256), mesh, [Replicate(), Shard(0)]) for i in range(3)
        }
        tensors["big"] = distribute_tensor(full(9, 8192), mesh, [Replicate(), Shard(0)])  # 1 MiB shards
        dp_group: Any = mesh["dp"].get_group()
    else:  # "lists": plain tensors, a TP-like shard per tp rank under its own key; DP groups as rank lists
        tp = rank % 2
        tensors = {f"w{i}.tp{tp}": full(i, 128) + 1000 * tp for i in range(3)}
        tensors[f"big.tp{tp}"] = full(9, 4096) + tp  # 1 MiB: broadcast straight into the tensor
        tensors[f"t.tp{tp}"] = (full(5, 64) + tp).t()  # not contiguous
        dp_group = [[0, 2], [1, 3]]
    expected = {k: (v.to_local() if isinstance(v, DTensor) else v).clone() for k, v in tensors.items()}
    state: dict[str, Any] = {"model": tensors, "meta": {"lr": 0.5, "name": "x"}}
    counts: dict[str, ReadCount] = {}

    def reader(tag: str) -> Any:
        counts[tag] = ReadCount()
        return lambda path: CountingReader(path, counts[tag])

    out: dict[str, Any] = {}
    ckpt = Checkpointer(config(work, dp_group=dp_group, storage_reader_factory=reader("dp")))
    assert ckpt.save(7, state) and ckpt.wait(60)
    for tag, cp in (
        ("dp", ckpt),
        ("none", Checkpointer(config(work, storage_reader_factory=reader("none")))),
    ):
        with torch.no_grad():
            for v in tensors.values():
                (v.to_local() if isinstance(v, DTensor) else v).fill_(-1.0)
        state["meta"] = {"lr": 0.0, "name": "scrambled"}
        step = cp.load_latest(state)
        equal = all(
            torch.equal(v.to_local() if isinstance(v, DTensor) else v, expected[k])
            for k, v in tensors.items()
        )
        assert cp.last_restore is not None
        out[tag] = {
            "step": step, "equal": equal, "meta": state["meta"], "count": dataclasses.asdict(counts[tag]),
            "read_storage": cp.last_restore.read_storage,
        }  # fmt: skip
        cp.close()
    report(work, rank, **out)


def disk_full(rank: int, work: Path) -> None:
    full = {"on": False}

    def writer(path: str) -> Any:
        budget = 64 if full["on"] and rank == 1 else 1 << 40
        return gated_writer(path, disk_full_after(budget))

    model = DistributedDataParallel(make_model(0))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    state = {"train": TrainState(model, opt)}
    ckpt = Checkpointer(config(work, dp_group="world", storage_writer_factory=writer))
    results = {}
    for step in range(1, 5):
        train_step(model, opt, rank, step)
        if step == 2:
            full["on"] = True
            results["save2"] = ckpt.save(step, state)
            assert ckpt.wait(60)
            full["on"] = False
        if step == 4:
            results["save4"] = ckpt.save(step, state)
            assert ckpt.wait(60)
    error = ckpt.last_error
    ckpt.close()
    dist.barrier()  # rank 0 commits after its dcp.save returned: look once it has closed too
    latest = ckpt.latest()
    report(work, rank, **results, trained_to=step, error=f"{type(error).__name__}: {error}" if error else "",
           latest=latest.step if latest else None, stats=dataclasses.asdict(ckpt.stats()))  # fmt: skip


def snapshot_interval(rank: int, work: Path) -> None:
    import time

    numel = (32 << 20) // 4 if rank == 1 else 16
    state = {"w": torch.randn(numel)}
    with Checkpointer(config(work, snapshot_dir=work / "shm", snapshot_budget=0.03)) as ckpt:
        before: list[int] = []
        for step in range(1, 7):
            time.sleep(0.02)
            before.append(ckpt.stats().snapshot_every)
            ckpt.snapshot(step, state)
        assert ckpt.snapshots.wait(30)
        saved = ckpt.save(6, state)
        taken = [step for step in range(7, 7 + 4 * ckpt.stats().snapshot_every)
                 if (time.sleep(0.02), ckpt.snapshot(step, state), ckpt.snapshots.wait(30))[1]]
        report(work, rank, before=before, saved=saved, every=ckpt.stats().snapshot_every, taken=taken)


def report(work: Path, rank: int, **values: Any) -> None:
    (work / f"result-rank{rank}.json").write_text(json.dumps(values, default=str))


def main() -> None:
    scenario, rank, world, port, work = (
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
        sys.argv[5],
    )
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    w = Path(work)
    if scenario == "ddp_save":
        ddp(rank, w, resume=False)
    elif scenario == "ddp_resume":
        ddp(rank, w, resume=True)
    elif scenario == "ddp_resume_unsettled":
        ddp(rank, w, resume=True, settle=False)
    elif scenario == "kill_mid_persist":
        kill_mid_persist(rank, w)
    elif scenario == "reads":
        reads(rank, w, sys.argv[6])
    elif scenario == "disk_full":
        disk_full(rank, w)
    elif scenario == "snapshot_interval":
        snapshot_interval(rank, w)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
