"""The SDC tests' training job: a tiny model on gloo whose replicas report parameter digests, one bit flipped on cue.

Run by torchrun under `vigil run --nodes ...` (one rank per host). Gradients are averaged by one flat all-reduce, so
the replicas stay bitwise equal and their digests (every `--digest-every` steps, `StepTimer.digest`) agree. The
batch of a step is drawn from a generator seeded by the step and the rank, so a replayed step reads what it read the
first time. It resumes with `load_latest` (which honours the controller's rollback bound, VIGIL_RESTORE_MAX_STEP),
snapshots every step and checkpoints every `--save-every` steps. After the optimizer step of `--flip-step` the rank
on host `--flip-host` flips one bit of one weight (silent data corruption: no NaN, no error); with `--flip-once FILE`
only the first time (the file is created), without it every time that step comes (a faulty GPU). It trains until
the file `--stop` exists (rank 0 looks, every rank learns it in the step's all-reduce), then `--tail` more steps.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, TrainState
from vigil.timer import StepTimer, TimerConfig


def flip_now(args: argparse.Namespace, step: int) -> bool:
    if step != args.flip_step or os.environ.get("VIGIL_HOST") != args.flip_host:
        return False
    if not args.flip_once:
        return True
    try:
        Path(args.flip_once).touch(exist_ok=False)
        return True
    except FileExistsError:
        return False


@record
def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--stop", required=True)
    p.add_argument("--tail", type=int, default=5)
    p.add_argument("--step-ms", type=float, default=100.0)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--digest-every", type=int, default=5)
    p.add_argument("--flip-host", default="")
    p.add_argument("--flip-step", type=int, default=-1)
    p.add_argument("--flip-once", default="")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    ckpt = Checkpointer(CheckpointConfig(directory=args.ckpt, keep=None, dp_group="world", collective_timeout_s=30,
                                         busy_timeout_s=5, snapshot_budget=None))
    state = {"train": TrainState(model, opt)}
    restored = ckpt.load_latest(state)
    step = 0 if restored is None else restored + 1
    print(f"[sdc worker] rank {rank} of {world} on {os.environ.get('VIGIL_HOST')} starts at step {step}", flush=True)
    timer = StepTimer(TimerConfig(start_step=step, coords={"dp": rank, "tp": 0, "pp": 0},
                                  digest_every=args.digest_every))
    last: int | None = None
    try:
        while last is None or step <= last:
            with timer.step(samples=8):
                gen = torch.Generator().manual_seed(step * 1000 + rank)
                x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()  # type: ignore[no-untyped-call]
                flat = torch.cat([q.grad.reshape(-1) for q in model.parameters() if q.grad is not None])
                stop = 1.0 if rank == 0 and Path(args.stop).exists() else 0.0
                flat = torch.cat([flat, torch.tensor([stop * world])])
                dist.all_reduce(flat)
                flat /= world
                offset = 0
                for q in model.parameters():
                    assert q.grad is not None
                    q.grad.copy_(flat[offset:offset + q.numel()].view_as(q.grad))
                    offset += q.numel()
                opt.step()
                if flip_now(args, step):
                    with torch.no_grad():
                        next(iter(model.parameters())).view(-1).view(torch.int32)[7] ^= 1 << 12
                    print(f"[sdc worker] rank {rank} flips one bit after step {step}", flush=True)
                timer.digest(model.parameters())
                time.sleep(args.step_ms / 1000)
            if last is None and flat[-1].item() > 0:
                last = step + args.tail
            ckpt.snapshot(step, state)
            if step % args.save_every == 0 and step > 0:
                ckpt.save(step, state)
            step += 1
    finally:
        timer.close()
    ckpt.close()
    dist.destroy_process_group()
    print(f"[sdc worker] rank {rank} finished at step {step - 1}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
