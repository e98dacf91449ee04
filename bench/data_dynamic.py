"""One rank slowed 30 % part-way through a real data-parallel job: static vs dynamic data, step rate vs healthy.

A torchrun job of `--ranks` processes (gloo, CPU) trains a tiny linear model; a sample costs
`--sample-ms` of sleep (standing for the accelerator's work: on 2 shared cores a CPU-bound
stand-in would measure contention, not the data path), one sleep per micro-batch of `--micro`
samples in every mode (gradient accumulation). From step `--slow-from` on, the last rank
takes 1.3x as long per sample. Gradients are summed over ranks with one all-reduce per step and
divided by the step's global sample count. Three ways to feed it:

* `static`: `ElasticSampler(mode="static")`, every rank its own batch of `--batch` samples per step;
* `dynamic`: `ElasticSampler(mode="dynamic")` (vigil.data as shipped): pieces are claimed from the
  rendezvous store's counter, but every rank still fills a batch of `--batch` per step;
* `balanced`: `ElasticSampler(mode="balanced")`: a step is a fixed global number of samples
  (ranks x batch), read as micro-batches of `--micro` claimed from the store's counter by whichever
  rank is free, so a slow rank simply takes fewer (what DLRover's dynamic sharding buys).

Measured on rank 0, in the same run (the machine's load drifts between runs): samples/s and steps/s
before the slowdown (healthy) and after it settled (slowed), and their ratio; the modes' runs are
interleaved. Bounds: 1/1.3 (a step waits for the slowest rank) and the job's capacity with one
rank at 1/1.3 speed. Balanced's slowed rate is also given against static's healthy rate of the
same repeat (what the claims cost when nobody is slow).

    python bench/data_dynamic.py [--ranks 4] [--steps 60] [--slow-from 25] [--repeats 3] [--no-append]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
MODES = ("static", "dynamic", "balanced")
WARMUP, SETTLE = 5, 5  # steps skipped at the start and after the slowdown begins


def worker(a: argparse.Namespace) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from vigil.data import ElasticSampler

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    samples = a.steps * world * a.batch * 2

    def work(n: int, step: int) -> None:  # the accelerator's share: sleep, so 2 loaded cores measure the data path
        slow = a.slow if rank == world - 1 and step >= a.slow_from else 1.0
        time.sleep(n * a.sample_ms * slow / 1000)

    def sync(n: int) -> int:  # one backward over the step's samples, one all-reduce of gradients + sample count
        if n:
            (model(torch.randn(n, 8)) ** 2).sum().backward()  # type: ignore[no-untyped-call]
        flat = torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
                          for p in model.parameters()] + [torch.tensor([float(n)])])
        dist.all_reduce(flat)
        opt.step()
        opt.zero_grad()
        return int(flat[-1].item())

    ends: list[float] = []
    got: list[int] = []
    sampler = ElasticSampler(samples, a.batch, shard_size=a.micro * 4, seed=0, mode=a.mode, micro_batch=a.micro)
    for step, micro_batches in zip(range(a.steps), sampler.steps(), strict=False):
        n = 0
        for ids in micro_batches:  # static, dynamic: one batch of --batch; balanced: claimed while any is left
            for at in range(0, len(ids), a.micro):  # every mode computes in micro-batches (gradient accumulation)
                work(min(a.micro, len(ids) - at), step)
            n += len(ids)
        got.append(sync(n))
        ends.append(time.perf_counter())
    if rank == 0:
        Path(a.out).write_text(json.dumps({"ends": ends, "samples": got}))
    dist.barrier()
    dist.destroy_process_group()


def run(mode: str, a: argparse.Namespace, tmp: Path, rep: int) -> dict[str, float]:
    """One job: (healthy, slowed) rates, before the slowdown and after it settled, in the same run."""
    out = tmp / f"{mode}-{rep}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={a.ranks}", __file__,
           "--worker", "--mode", mode, "--slow", str(a.slow), "--out", str(out), "--steps", str(a.steps),
           "--slow-from", str(a.slow_from), "--batch", str(a.batch), "--micro", str(a.micro),
           "--sample-ms", str(a.sample_ms)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    doc = json.loads(out.read_text())
    ends, got = doc["ends"], doc["samples"]

    def rate(first: int, last: int) -> tuple[float, float]:  # steps first..last-1
        span = ends[last - 1] - ends[first - 1]
        return (last - first) / span, sum(got[first:last]) / span

    h_steps, h_samples = rate(WARMUP, a.slow_from)
    s_steps, s_samples = rate(a.slow_from + SETTLE, len(ends))
    return {"h_steps": h_steps, "h_samples": h_samples, "s_steps": s_steps, "s_samples": s_samples,
            "ratio": s_samples / h_samples}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=MODES, default="static", help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    p.add_argument("--slow", type=float, default=1.3, help="the slowed rank's time per sample, x (default 1.3)")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--slow-from", type=int, default=25)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=16, help="samples per rank per step (balanced: on average)")
    p.add_argument("--micro", type=int, default=2, help="samples per claim (balanced)")
    p.add_argument("--sample-ms", type=float, default=10.0)
    p.add_argument("--modes", default=",".join(MODES), help="which modes to run (static first: the others' yardstick)")
    p.add_argument("--no-append", action="store_true")
    a = p.parse_args()
    if a.worker:
        worker(a)
        return
    modes = [m for m in MODES if m in a.modes.split(",")]
    load = os.getloadavg()
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="data-dynamic-") as tmp:
        for rep in range(a.repeats):
            for mode in modes:  # interleaved, so the machine's load drifts over every mode alike
                got = run(mode, a, Path(tmp), rep)
                rows.append((mode, got))
                print(mode, rep, got, flush=True)
    bound = (a.ranks - 1 + 1 / a.slow) / a.ranks
    lines = [
        f"## data_dynamic.py — {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC", "",
        f"Machine: `{platform.node()}`, {os.cpu_count()} CPUs; load average at start {load[0]:.1f}, {load[1]:.1f}, "
        f"{load[2]:.1f}. torchrun, gloo, {a.ranks} ranks, {a.batch} samples per rank per step ({a.ranks * a.batch} "
        f"per step; `balanced` claims {a.micro} at a time); a sample costs {a.sample_ms:g} ms of sleep; from step "
        f"{a.slow_from} the last rank takes {a.slow:g}x as long, no restart. Healthy = steps {WARMUP}..{a.slow_from - 1}, "
        f"slowed = steps {a.slow_from + SETTLE}..{a.steps - 1} of the same run; {a.repeats} runs per mode.", "",
        "| mode | run | healthy steps/s | slowed steps/s | healthy samples/s | slowed samples/s | slowed / healthy "
        "| slowed / static's healthy |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for i, (mode, g) in enumerate(rows):
        static = rows[i - i % len(modes)][1]  # the same repeat's first (static) run
        lines.append(f"| {mode} | {i // len(modes) + 1} | {g['h_steps']:.2f} | {g['s_steps']:.2f} | {g['h_samples']:.0f} | "
                     f"{g['s_samples']:.0f} | {g['ratio']:.1%} | {g['s_samples'] / static['h_samples']:.1%} |")
    lines += ["", f"Bounds: a step that waits for the slowest rank runs at 1/{a.slow:g} = {1 / a.slow:.1%} of healthy; "
              f"with one of {a.ranks} ranks at 1/{a.slow:g} speed the job's capacity is {bound:.1%}.", ""]
    text = "\n".join(lines)
    print(text)
    if not a.no_append:
        with RESULTS.open("a") as f:
            f.write("\n" + text + "\n")


if __name__ == "__main__":
    main()
