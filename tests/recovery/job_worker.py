"""A small real training job for the recovery tests: DDP over gloo, `Checkpointer`, `StepTimer`, faults on cue.

Run by torchrun under `vigil run --nodes ...` (one process per host here). It resumes with
`load_latest` and numbers its steps from there (`start_step`), saves every `--save-every`
steps, and sleeps `--step-ms` per step so the job is slow enough to watch. Faults, each on
host `--fault-host` (its local rank 0) at step `--fault-step`, once per `--once FILE`
(the file is created when it fires; without it the fault fires every time the step comes):

* `xid`: prints an Xid 79 line and dies with a CUDA error (a GPU fallen off the bus);
* `crash`: a ValueError raised in user code (a traceback, exit 1);
* `hang`: stops in the middle of a step for good (its peers wait in the all-reduce).

`--probe FILE --probe-out DIR`: at start each rank tries to read FILE (its agent's private key: `vigil run --user`
keeps it out of reach) and writes what it got and its uid to DIR/probe-<pid>.json.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from vigil.app.demo.fakekmsg import xid_to_env_log
from vigil.recovery.checkpoint import CheckpointConfig, Checkpointer, TrainState
from vigil.timer import StepTimer, TimerConfig


def kernel_xid(code: int, text: str) -> bool:
    """Stand in for the NVIDIA driver: an Xid record in this host's fake kernel log (`FAKE_KMSG`, which its agent
    follows as /dev/kmsg); False when there is none. A printed Xid is only the process's claim (issue 49)."""
    return xid_to_env_log("FAKE_KMSG", code, text)  # the rank's error follows at once: its agent reads past it


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--step-ms", type=float, default=100.0)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--fault", choices=("none", "xid", "crash", "hang"), default="none")
    p.add_argument("--fault-host", default="")
    p.add_argument("--fault-step", type=int, default=-1)
    p.add_argument("--once", default="")
    p.add_argument("--xid", action="append", default=[], metavar="CODE:HOST:STEP",
                   help="the driver reports Xid CODE for HOST's rank at STEP (once: --once-dir), and the rank dies")
    p.add_argument("--once-dir", default="")
    p.add_argument("--record-env", default="", metavar="DIR",
                   help="write the CUDA_VISIBLE_DEVICES this rank was started with to DIR/env-<host>-g<generation>")
    p.add_argument("--probe", default="", help="a file this training process should not be able to read")
    p.add_argument("--probe-out", default="", help="where to say what reading --probe gave")
    return p.parse_args()


def load_batch(step: int) -> torch.Tensor:
    raise ValueError(f"corrupt sample in shard {step % 7} (user code)")


XID_TEXT = {31: "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS faulted @ 0x7f23_4a600000",
            79: "GPU has fallen off the bus.",
            48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6."}


def driver_xids(args: argparse.Namespace, step: int) -> None:
    """`--xid CODE:HOST:STEP`: the driver's record in this host's kernel log, then the CUDA error the rank sees."""
    for spec in args.xid:
        code, host, at = spec.split(":")
        if step != int(at) or os.environ.get("VIGIL_HOST") != host or int(os.environ.get("LOCAL_RANK", "0")) != 0:
            continue
        once = Path(args.once_dir) / f"xid-{code}-{host}-{at}.once"
        if once.exists():
            continue
        once.touch()
        assert kernel_xid(int(code), XID_TEXT.get(int(code), "")), "no FAKE_KMSG to stand in for the kernel log"
        raise RuntimeError("CUDA error: an illegal memory access was encountered" if code == "31"
                           else "CUDA error: unspecified launch failure")


def fault(args: argparse.Namespace, step: int) -> None:
    driver_xids(args, step)
    if args.fault == "none" or step != args.fault_step or os.environ.get("VIGIL_HOST") != args.fault_host:
        return
    if int(os.environ.get("LOCAL_RANK", "0")) != 0:
        return
    if args.once:
        if Path(args.once).exists():
            return
        Path(args.once).touch()
    if args.fault == "xid":
        if not kernel_xid(79, "GPU has fallen off the bus."):
            print(f"NVRM: Xid (PCI:0000:3b:00): 79, pid={os.getpid()}, GPU has fallen off the bus.", file=sys.stderr,
                  flush=True)
        raise RuntimeError("CUDA error: unspecified launch failure")
    if args.fault == "hang":
        print(f"[worker] hanging at step {step}", flush=True)
        while True:
            time.sleep(3600)
    load_batch(step)


def probe(path: str, out: str) -> None:
    """Try to read `path` (the agent's key) and say how it went, with this process's uid, under `out`."""
    try:
        with open(path, "rb") as fh:
            fh.read(1)
        got = "read"
    except OSError as exc:
        got = errno.errorcode.get(exc.errno or 0, str(exc))
    Path(out, f"probe-{os.getpid()}.json").write_text(json.dumps({"uid": os.getuid(), "read": got}))


@record
def main() -> int:
    args = parse()
    if args.record_env:  # what the agent started this rank with (a per-GPU quarantine leaves GPUs out)
        name = f"env-{os.environ.get('VIGIL_HOST')}-g{os.environ.get('VIGIL_GENERATION')}"
        (Path(args.record_env) / name).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
    if args.probe:
        probe(args.probe, args.probe_out)
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
    start = 0 if restored is None else restored + 1
    print(f"[worker] rank {rank} of {dist.get_world_size()} starts at step {start} (checkpoint {restored})",
          flush=True)
    timer = StepTimer(TimerConfig(start_step=start, coords={"dp": rank, "tp": 0, "pp": 0}))
    gen = torch.Generator().manual_seed(rank)
    try:
        for step in range(start, args.steps):
            with timer.step(samples=8):
                fault(args, step)
                x, y = torch.randn(8, 32, generator=gen), torch.randn(8, 4, generator=gen)
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                time.sleep(args.step_ms / 1000)
            if step > start and step % args.save_every == 0:
                ckpt.save(step, state)
    finally:
        timer.close()
    ckpt.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
