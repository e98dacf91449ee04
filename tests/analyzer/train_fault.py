"""A small DDP job (gloo, CPU) that ends badly on purpose; run by torchrun under `vigil run` in tests.

FAULT=crash: rank FAULT_RANK raises an NVLink-style CUDA error at step FAULT_STEP.
FAULT=hang:  rank FAULT_RANK sleeps forever before step FAULT_STEP's all-reduce; its peers'
             gloo collectives time out after the process group's 30 s.
The step timer (and its hang watchdog) runs with its defaults.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from vigil.timer import StepTimer

FAULT = os.environ.get("FAULT", "")
FAULT_RANK = int(os.environ.get("FAULT_RANK", "-1"))
FAULT_STEP = int(os.environ.get("FAULT_STEP", "15"))
STEPS = int(os.environ.get("STEPS", "40"))


@record
def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DistributedDataParallel(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    timer = StepTimer()
    for step in range(STEPS):
        if rank == FAULT_RANK and step == FAULT_STEP:
            if FAULT == "crash":
                raise RuntimeError("CUDA error: uncorrectable NVLink error detected during execution")
            if FAULT == "hang":
                while True:  # a stuck GPU: this rank never joins the next all-reduce
                    time.sleep(3600)
        with timer.step(tokens=8 * 16):
            with timer.phase("forward"):
                loss = model(torch.randn(8, 16)).pow(2).mean()
            with timer.phase("backward"):
                loss.backward()
            with timer.phase("optimizer"):
                opt.step()
                opt.zero_grad()
        time.sleep(0.05)
    timer.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
