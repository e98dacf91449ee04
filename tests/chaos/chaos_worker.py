"""The chaos test's training job: DDP over gloo, `Checkpointer`, `StepTimer`, ended by the harness.

Run by torchrun under `vigil run --nodes ...` (one rank per host). It resumes with
`load_latest`, saves every `--save-every` steps and trains until the file `--stop` exists
(rank 0 looks, every rank learns it in the step's all-reduce), then takes `--tail` more steps
and exits 0: the job is as long as the faults the harness injects, not a guessed step count.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, TrainState
from vigil.timer import StepTimer, TimerConfig


@record
def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--stop", required=True)
    p.add_argument("--tail", type=int, default=5)
    p.add_argument("--step-ms", type=float, default=100.0)
    p.add_argument("--save-every", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ckpt = Checkpointer(CheckpointConfig(directory=args.ckpt, keep=3, dp_group="world", collective_timeout_s=30,
                                         busy_timeout_s=5))
    state = {"train": TrainState(model, opt)}
    restored = ckpt.load_latest(state)
    step = 0 if restored is None else restored + 1
    print(f"[chaos worker] rank {rank} of {dist.get_world_size()} starts at step {step}", flush=True)
    timer = StepTimer(TimerConfig(start_step=step, coords={"dp": rank, "tp": 0, "pp": 0}))
    gen = torch.Generator().manual_seed(rank)
    last: int | None = None
    try:
        while last is None or step <= last:
            with timer.step(samples=8):
                x, y = torch.randn(8, 32, generator=gen), torch.randn(8, 4, generator=gen)
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                flag = torch.tensor([1.0 if rank == 0 and Path(args.stop).exists() else 0.0])
                dist.all_reduce(flag)
                time.sleep(args.step_ms / 1000)
            if last is None and flag.item() > 0:
                last = step + args.tail
            if step % args.save_every == 0 and step > 0:
                ckpt.save(step, state)
            step += 1
    finally:
        timer.close()
    ckpt.close()
    dist.destroy_process_group()
    print(f"[chaos worker] rank {rank} finished at step {step - 1}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
