"""One rank of a real data-parallel job (torchrun, gloo, CPU) reading through `vigil.data`; run by tests.

    torchrun --nproc-per-node W elastic_job.py WORKDIR TAG MODE [CRASH_AFTER]

A dataset of `N` known sample ids, a linear model, SGD; gradients summed over the ranks and
divided by the step's global sample count (a rank may get a short or empty batch). The
sampler is checkpointed with the model every `EVERY` steps; a started job resumes from the
latest checkpoint. Each rank logs `{"step", "ids", "loss"}` per step to
WORKDIR/ids-TAG-rankR.jsonl and rank 0 what it resumed from to WORKDIR/resume-TAG.json. With
balanced mode a step's micro-batches (of 2) are claimed by whichever rank is free. With
CRASH_AFTER every rank dies (exit 3, nothing saved) after that step, once the last
checkpoint is committed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from vigil.data import ElasticSampler
from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, TrainState

N, SHARD, BATCH, EVERY = 240, 16, 4, 4


def features(ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    i = torch.tensor(ids, dtype=torch.float64).unsqueeze(1)
    return torch.sin(i * torch.arange(1, 9) * 0.1).float(), torch.cos(i * 0.05).squeeze(1).float()


def main() -> int:
    work, tag, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    crash_after = int(sys.argv[4]) if len(sys.argv) > 4 else -1
    t0 = time.monotonic()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler = ElasticSampler(N, BATCH, shard_size=SHARD, seed=7, mode=mode, micro_batch=2)
    ckpt = Checkpointer(CheckpointConfig(directory=str(work / "ckpt"), dp_group="world"))
    state = {"train": TrainState(model, opt), "data": sampler}
    resumed = ckpt.load_latest(state)
    step = 0 if resumed is None else resumed + 1
    log = (work / f"ids-{tag}-rank{rank}.jsonl").open("a")
    for micro_batches in sampler.steps():  # static, dynamic: one batch a step; balanced: micro-batches claimed
        opt.zero_grad()
        ids: list[int] = []
        loss_sum = 0.0
        for micro in micro_batches:
            x, y = features(micro)
            loss = ((model(x).squeeze(1) - y) ** 2).sum()
            loss.backward()  # type: ignore[no-untyped-call]  # gradients accumulate over the micro-batches
            ids += micro
            loss_sum += loss.item()
        flat = torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())  # none read
                          for p in model.parameters()] + [torch.tensor([float(len(ids)), loss_sum])])
        dist.all_reduce(flat)
        count, total = flat[-2].item(), flat[-1].item()
        offset = 0
        for p in model.parameters():
            p.grad = flat[offset:offset + p.numel()].view_as(p) / count
            offset += p.numel()
        opt.step()
        if rank == 0 and (seg := sampler.segment) is not None and not (work / f"resume-{tag}.json").exists():
            (work / f"resume-{tag}.json").write_text(json.dumps(
                {"resumed": resumed, "world": seg.world_size, "samples": seg.samples, "in_flight": seg.in_flight}))
        log.write(json.dumps({"step": step, "ids": ids, "loss": total / count}) + "\n")
        log.flush()
        if step > 0 and step % EVERY == 0:
            ckpt.save(step, state)
        if step == crash_after:
            ckpt.close()  # the last checkpoint is committed; what followed it is lost with the process
            os._exit(3)
        step += 1
    ckpt.close()
    print(f"rank {rank}: {time.monotonic() - t0:.1f} s in main", flush=True)
    dist.barrier()  # rank 0 hosts the store the others still claim shards from: everyone is done first
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
