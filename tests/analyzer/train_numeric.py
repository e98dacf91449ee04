"""A small data-parallel job (gloo, CPU) whose rank NAN_RANK's gradient turns NaN at step NAN_STEP; run by torchrun.

Each rank reports its loss, its local gradient norm and non-finite count (before the all-reduce) and its update ratio
through the step timer, spooled to SPOOL (one directory per rank). After the all-reduce every rank's parameters hold
the NaN, so from the next step on every rank reports non-finite values: only the first step names the culprit.
With FLIP_RANK, that rank flips one bit of one parameter after the optimizer step of FLIP_STEP (silent data
corruption: nothing turns non-finite); every rank reports a replica digest every DIGEST_EVERY steps and keeps a
snapshot (parameters, data position) at each (saved to SNAPSHOTS at the end). With REPLAY_FROM/REPLAY_TO it replays
those steps from that snapshot instead (`replay`): the controller's one-machine replay, re-run and compare digests.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from vigil.timer import SpoolConfig, StepTimer, TimerConfig, digest
from vigil.timer.health import grad_stats, update_ratio

NAN_RANK = int(os.environ.get("NAN_RANK", "-1"))
NAN_STEP = int(os.environ.get("NAN_STEP", "12"))
STEPS = int(os.environ.get("STEPS", "30"))
FLIP_RANK = int(os.environ.get("FLIP_RANK", "-1"))
FLIP_STEP = int(os.environ.get("FLIP_STEP", "12"))
DIGEST_EVERY = int(os.environ.get("DIGEST_EVERY", "5"))


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, data: torch.Generator, rank: int, world: int,
               step: int, timer: StepTimer | None, flip: bool) -> None:
    """One step: forward, backward, all-reduce, SGD; a NaN or a flipped bit where the environment says."""
    params = list(model.parameters())
    x = torch.randn(256, 16, generator=data)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    if rank == NAN_RANK and step == NAN_STEP:
        params[0].grad[3, 5] = float("nan")  # type: ignore[index]
    norm, bad = grad_stats(params)  # this rank's own gradients, before they are averaged
    for p in params:
        dist.all_reduce(p.grad)  # type: ignore[arg-type]
        p.grad /= world  # type: ignore[operator]
    before = [p.detach().clone() for p in params]
    opt.step()
    if flip and rank == FLIP_RANK and step == FLIP_STEP:
        with torch.no_grad():
            params[0].view(-1).view(torch.int32)[37] ^= 1 << 9  # one mantissa bit of one weight
    if timer is not None:
        timer.health(loss=loss, grad_norm=norm, nonfinite=bad, update_ratio=update_ratio(before, params))
        timer.digest(params)


def snapshot(model: torch.nn.Module, data: torch.Generator) -> dict[str, Any]:
    return {"params": [p.detach().clone() for p in model.parameters()], "data": data.get_state()}


def restore(model: torch.nn.Module, data: torch.Generator, snap: dict[str, Any]) -> None:
    with torch.no_grad():
        for p, q in zip(model.parameters(), snap["params"], strict=True):
            p.copy_(q)
    data.set_state(snap["data"])


def replay(model: torch.nn.Module, opt: torch.optim.Optimizer, data: torch.Generator, rank: int, world: int) -> None:
    """From this rank's snapshot of REPLAY_FROM, recompute the steps up to REPLAY_TO twice (the flip repeating, then
    not) and write every rank's digest at REPLAY_TO of each to REPLAY_OUT (rank 0): the one-machine replay."""
    snaps = torch.load(os.path.join(os.environ["SNAPSHOTS"], f"{rank}.pt"), weights_only=False)
    lo, hi = int(os.environ["REPLAY_FROM"]), int(os.environ["REPLAY_TO"])
    out: dict[str, Any] = {"steps": hi - lo}
    for name, flip in (("repeats", True), ("gone", False)):
        restore(model, data, snaps[lo])
        for step in range(lo + 1, hi + 1):
            train_step(model, opt, data, rank, world, step, None, flip)
        mine = torch.tensor([int(digest.param_digest(list(model.parameters())))], dtype=torch.int64)
        every = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(every, mine)
        out[name] = [int(t) for t in every]
    if rank == 0:
        with open(os.environ["REPLAY_OUT"], "w", encoding="utf-8") as f:
            json.dump(out, f)


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(100 + rank)
    if os.environ.get("REPLAY_FROM"):
        replay(model, opt, data, rank, world)
        dist.barrier()  # nobody tears gloo down while a peer's last collective is in flight (an abort at exit)
        dist.destroy_process_group()
        return
    timer = StepTimer(TimerConfig(device="cpu", job_id=os.environ["JOB"], host=f"gnode-{rank}", rank=rank,
                                  world_size=world, digest_every=DIGEST_EVERY,
                                  spool=SpoolConfig(directory=os.path.join(os.environ["SPOOL"], str(rank)))))
    snaps = {}
    for step in range(STEPS):
        with timer.step(samples=256):
            train_step(model, opt, data, rank, world, step, timer, flip=True)
        if step % DIGEST_EVERY == 0:  # the in-memory snapshots a replay restores (kept on disk for the replay run)
            snaps[step] = snapshot(model, data)
    timer.close()
    if os.environ.get("SNAPSHOTS"):
        torch.save(snaps, os.path.join(os.environ["SNAPSHOTS"], f"{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
