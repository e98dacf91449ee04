"""A small data-parallel job (gloo, CPU) whose rank NAN_RANK's gradient turns NaN at step NAN_STEP; run by torchrun.

Each rank reports its loss, its local gradient norm and non-finite count (before the all-reduce) and its update ratio
through the step timer, spooled to SPOOL (one directory per rank). After the all-reduce every rank's parameters hold
the NaN, so from the next step on every rank reports non-finite values: only the first step names the culprit.
With FLIP_RANK, that rank flips one bit of one parameter after the optimizer step of FLIP_STEP (silent data
corruption: nothing turns non-finite); every rank reports a replica digest every DIGEST_EVERY steps.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from vigil.timer import SpoolConfig, StepTimer, TimerConfig
from vigil.timer.health import grad_stats, update_ratio

NAN_RANK = int(os.environ.get("NAN_RANK", "-1"))
NAN_STEP = int(os.environ.get("NAN_STEP", "12"))
STEPS = int(os.environ.get("STEPS", "30"))
FLIP_RANK = int(os.environ.get("FLIP_RANK", "-1"))
FLIP_STEP = int(os.environ.get("FLIP_STEP", "12"))
DIGEST_EVERY = int(os.environ.get("DIGEST_EVERY", "5"))


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(100 + rank)
    timer = StepTimer(TimerConfig(device="cpu", job_id=os.environ["JOB"], host=f"gnode-{rank}", rank=rank,
                                  world_size=world, digest_every=DIGEST_EVERY, spool=SpoolConfig(directory=os.path.join(os.environ["SPOOL"],
                                                                                             str(rank)))))
    params = list(model.parameters())
    for step in range(STEPS):
        with timer.step(samples=256):
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
            timer.health(loss=loss, grad_norm=norm, nonfinite=bad, update_ratio=update_ratio(before, params))
            if rank == FLIP_RANK and step == FLIP_STEP:
                with torch.no_grad():
                    params[0].view(-1).view(torch.int32)[37] ^= 1 << 9  # one mantissa bit of one weight
            timer.digest(params)
    timer.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
