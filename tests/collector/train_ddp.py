"""A tiny 2-rank DDP training (gloo, CPU) instrumented with the step timer; run by torchrun in tests."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from vigil.timer import StepTimer

STEPS = int(os.environ.get("TRAIN_STEPS", "8"))
FAIL_RANK = int(os.environ.get("TRAIN_FAIL_RANK", "-1"))  # this rank raises at step 3


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    timer = StepTimer()
    for step in range(STEPS):
        if step == 3 and dist.get_rank() == FAIL_RANK:
            raise RuntimeError(f"injected failure on rank {FAIL_RANK}")
        with timer.step(tokens=16 * 32):
            with timer.phase("data"):
                x, y = torch.randn(16, 32), torch.randn(16, 4)
            with timer.phase("forward"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            with timer.phase("backward"):
                loss.backward()
            with timer.phase("optimizer"):
                opt.step()
                opt.zero_grad()
    print(f"rank {dist.get_rank()} done, loss {loss.item():.3f}", flush=True)
    timer.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
