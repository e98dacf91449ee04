"""A runnable example: a small MLP trained on the CPU, timed with `StepTimer`.

    python -m vigil.timer.example          # or: python timer/example.py

Writes to a temporary spool directory and prints the files and the last record.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from torch import nn

from vigil.timer import SpoolConfig, StepTimer, TimerConfig


def main(steps: int = 20, spool_dir: str | None = None) -> Path:
    spool = Path(spool_dir or tempfile.mkdtemp(prefix="vigil-spool-"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch, params = 64, sum(p.numel() for p in model.parameters())
    # forward + backward of a dense model: ~6 FLOPs per parameter per sample
    t = StepTimer(TimerConfig(job_id="example", device="cpu", flops_per_step=6 * params * batch,
                               spool=SpoolConfig(directory=spool)))

    @t.timed("optimizer")
    def optimizer_step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(steps):
        with t.phase("data"):  # outside the step: attached to the next step
            x = torch.randn(batch, 256)
        with t.step(samples=batch) as s:
            with t.phase("forward"):
                loss = (model(x) - x).pow(2).mean()
            with t.phase("backward"):
                loss.backward()
            optimizer_step()
            s.tokens = batch  # counts may also be set inside the step
    t.close()

    for path in sorted(spool.rglob("*.jsonl")):
        print(f"{path}: {len(path.read_text().splitlines())} records")
    if t.spool_path is not None:
        last = t.spool_path.read_text().splitlines()[-1]
        print(json.dumps(json.loads(last), indent=2))
    return spool


if __name__ == "__main__":
    main()
