"""A deterministic real training job for the snapshot test: 3 ranks over gloo, snapshots every step.

Run by torchrun (under `vigil run --nodes ...`, one process per host, or standalone as the
uninterrupted reference). Gradients are averaged with one all-reduce of a flat buffer (DDP
reorders its buckets after the first iteration, which changes the order floats are summed in);
dropout uses torch's global generator and the data its own, both saved with `RNGState`, so a
run resumed from a snapshot is bitwise identical to an uninterrupted one. Per-rank state is
keyed by rank and every rank restores its own (``dp_group=None``). Persisted checkpoints every
`--save-every` steps, a snapshot every step. Faults, each once (its file created when it fires,
holding the onset's Unix time): `--fault KIND:HOST:STEP` (repeatable; files under `--once-dir`) or
the older `--crash-host H --crash-step S [--xid] --once FILE`; with `--armed` a fault waits, from its
step on, for its `.arm` file next to the once file (a benchmark fires one only once the previous
fault was recovered). `crash` raises a ValueError at the start of the step; `xid` prints an Xid 79
line and dies of a CUDA error (a GPU lost); `hang` stops mid-step for good, after its backward and
before the gradients' all-reduce, in which its peers then wait. Snapshots go to `--snapshots`, else
where the agent says (VIGIL_SNAPSHOT_DIR). At the end rank 0 writes the sha256 of the parameters and
optimizer state to `--out`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from vigil.app.demo.fakekmsg import xid_to_env_log
from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, RNGState, TrainState
from vigil.timer import StepTimer, TimerConfig


def kernel_xid(code: int, text: str) -> bool:
    """Stand in for the NVIDIA driver: an Xid record in this host's fake kernel log (`FAKE_KMSG`, which its agent
    follows as /dev/kmsg); False when there is none. A printed Xid is only the process's claim (issue 49)."""
    return xid_to_env_log("FAKE_KMSG", code, text)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--snapshots", default=None, help="default: VIGIL_SNAPSHOT_DIR (set by the agent)")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--save-every", type=int, default=10)
    p.add_argument("--step-ms", type=float, default=50.0)
    p.add_argument("--crash-host", default="")
    p.add_argument("--crash-step", type=int, default=-1)
    p.add_argument("--once", default="")
    p.add_argument("--xid", action="store_true", help="the crash is a GPU lost: an Xid line, then a CUDA error")
    p.add_argument("--fault", action="append", default=[], metavar="KIND:HOST:STEP", help="crash, xid or hang")
    p.add_argument("--once-dir", default="", help="where --fault's once files go (default: --ckpt)")
    p.add_argument("--armed", action="store_true", help="a --fault fires at the first step >= STEP at which its "
                   "file <once-dir>/KIND-HOST-STEP.arm exists (the caller arms it)")
    args = p.parse_args()
    faults = [(k, h, int(s), Path(args.once_dir or args.ckpt) / f"{k}-{h}-{s}.once")
              for k, h, s in (f.split(":") for f in args.fault)]
    if args.crash_host:
        faults.append(("xid" if args.xid else "crash", args.crash_host, args.crash_step, Path(args.once)))
    args.faults = faults
    return args


def fault(args: argparse.Namespace, step: int, when: str) -> None:
    """Fire the fault due at `step` on this host (`when`: "start" of the step, or "mid" of it: hangs)."""
    for kind, host, at, once in args.faults:
        due = step >= at and once.with_suffix(".arm").exists() if args.armed else step == at
        if not due or os.environ.get("VIGIL_HOST") != host or (kind == "hang") != (when == "mid"):
            continue
        if once.exists():
            continue
        once.parent.mkdir(parents=True, exist_ok=True)
        once.write_text(f"{time.time():.6f}")  # the onset, for the benchmark
        if kind == "xid":
            if not kernel_xid(79, "GPU has fallen off the bus."):
                print(f"NVRM: Xid (PCI:0000:3b:00): 79, pid={os.getpid()}, GPU has fallen off the bus.",
                      file=sys.stderr, flush=True)
            raise RuntimeError("CUDA error: unspecified launch failure (the GPU fell off the bus)")
        if kind == "hang":
            print(f"[snap_worker] hanging in step {step}", flush=True)
            while True:
                time.sleep(3600)
        raise ValueError(f"corrupt sample at step {step} (user code)")


def digest(model: torch.nn.Module, opt: torch.optim.Optimizer) -> str:
    h = hashlib.sha256()

    def feed(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            h.update(bytes(obj.detach().contiguous().reshape(-1).view(torch.uint8).tolist()))
        elif isinstance(obj, dict):
            for k in sorted(obj, key=str):
                h.update(str(k).encode())
                feed(obj[k])
        elif isinstance(obj, list | tuple):
            for v in obj:
                feed(v)
        else:
            h.update(repr(obj).encode())

    feed(model.state_dict())
    feed(opt.state_dict())
    return h.hexdigest()


@record
def main() -> int:
    args = parse()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(64, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch.manual_seed(100 + rank)  # dropout differs per rank
    data = torch.Generator().manual_seed(rank)
    state: dict[str, Any] = {"train": TrainState(model, opt), f"rng{rank}": RNGState(data)}
    ckpt = Checkpointer(CheckpointConfig(directory=args.ckpt, snapshot_dir=args.snapshots, keep=2, dp_group=None,
                                         collective_timeout_s=30, busy_timeout_s=5, snapshot_wait_s=5,
                                         snapshot_budget=None))  # a snapshot every step: the tests' steps lost <= 1
    restored = ckpt.load_latest(state)
    start = 1 if restored is None else restored + 1
    source = ckpt.last_restore.source if ckpt.last_restore is not None else "-"
    print(f"[snap_worker] rank {rank} of {world} starts at step {start} (restored {restored} from {source})", flush=True)
    timer = StepTimer(TimerConfig(start_step=start, coords={"dp": rank, "tp": 0, "pp": 0}))
    params = list(model.parameters())
    try:
        for step in range(start, args.steps + 1):
            with timer.step(samples=8):
                fault(args, step, "start")
                x, y = torch.randn(8, 32, generator=data), torch.randn(8, 4, generator=data)
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                flat = torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])
                fault(args, step, "mid")
                dist.all_reduce(flat)
                offset = 0
                for p in params:
                    assert p.grad is not None
                    p.grad.copy_(flat[offset : offset + p.numel()].view_as(p) / world)
                    offset += p.numel()
                opt.step()
                time.sleep(args.step_ms / 1000)
            ckpt.snapshot(step, state)
            if step % args.save_every == 0:
                ckpt.save(step, state)
    finally:
        timer.close()
    ckpt.close()
    if rank == 0:
        Path(args.out).write_text(digest(model, opt))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
