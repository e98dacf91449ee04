"""Replica digest and health-signal cost per step on the CPU at 50 MiB and 500 MiB of parameters (issue 51).

For each size: an MLP of float32 Linear layers holding that many parameter bytes; the median of `--repeats` timings of

* ``digest``: `vigil.timer.digest.param_digest(model.parameters())` (what `StepTimer.digest` computes on a digest step);
* ``grad_stats``: `vigil.timer.health.grad_stats` (the health signals' norm, every step);
* ``step``: one training step (forward + backward of a batch of `--batch` rows, SGD update) of the same model;

and the digest's share of the step time at the default interval (`TimerConfig.digest_every`): digest / (every x step).
Threads: torch's default for this machine (`torch.get_num_threads()`, printed), the machine being shared.

    python bench/digest_cost.py [--repeats 5] [--batch 64] [--append]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from vigil.timer import TimerConfig
from vigil.timer.digest import param_digest
from vigil.timer.health import grad_stats

WIDTH = 2048  # features of each layer: a 2048x2048 float32 layer is 16 MiB


def model_of(mib: int) -> torch.nn.Sequential:
    layers = max(1, round(mib * 2**20 / (4 * WIDTH * (WIDTH + 1))))
    return torch.nn.Sequential(*[m for _ in range(layers) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())])


def timed(fn: Callable[[], object], repeats: int) -> float:
    fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out)


def measure(mib: int, batch: int, repeats: int) -> tuple[float, float, float, float]:
    """(MiB of parameters, step ms, digest ms, grad_stats ms) of the model of `mib` MiB."""
    model = model_of(mib)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=1e-4)
    x = torch.randn(batch, WIDTH)

    def step() -> None:
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()

    step_ms = timed(step, repeats)
    return (sum(p.numel() * p.element_size() for p in params) / 2**20, step_ms,
            timed(lambda: param_digest(params), repeats), timed(lambda: grad_stats(params), repeats))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--append", action="store_true", help="append the table to bench/RESULTS.md")
    a = ap.parse_args()
    every = TimerConfig().digest_every
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    rows = []
    for mib in (50, 500):
        size, step_ms, digest_ms, stats_ms = measure(mib, a.batch, a.repeats)
        share = digest_ms / (every * step_ms) * 100
        rows.append(f"| {size:.0f} MiB | {step_ms:.1f} | {digest_ms:.1f} | {digest_ms / size * 1000:.0f} | "
                    f"{share:.2f} % | {stats_ms:.1f} | {stats_ms / step_ms * 100:.1f} % |")
    head = [f"## Replica digest and health-signal cost on the CPU (bench/digest_cost.py, issue 51) — "
            f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC", "",
            f"torch {torch.__version__}, {torch.get_num_threads()} threads, hash_tensor "
            f"{'yes' if hasattr(torch, 'hash_tensor') else 'no'}; step: batch {a.batch}, float32 MLP of {WIDTH}-wide "
            f"layers; median of {a.repeats}; digest every {every} steps (the default); load average before the run "
            f"{load}.", "",
            "| parameters | step ms | digest ms | digest us/MiB | digest per step at the interval | grad_stats ms "
            "| grad_stats per step |", "|---|---:|---:|---:|---:|---:|---:|"]
    text = "\n".join(head + rows) + "\n"
    print(text)
    if a.append:
        with Path(__file__).with_name("RESULTS.md").open("a", encoding="utf-8") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
