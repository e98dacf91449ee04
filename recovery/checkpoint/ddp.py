"""Bitwise continuation of a `DistributedDataParallel` model after a restore: one no-op DDP iteration first.

DDP lays out its gradient buckets at construction (parameters in reverse order) and rebuilds them after its
first iteration, in the order the gradients became ready. A job restored mid-run constructs a new DDP, so its
first step after the restore all-reduces in the construction layout while the uninterrupted run used the
rebuilt one: with more than two ranks a bucket's elements are summed in another order and the gradients
differ in the last bits (with two ranks a + b = b + a, and nothing differs). `settle_ddp(model, *inputs)` runs
that first iteration without effect — a forward, a backward of zero (every gradient 0), the gradients dropped
(set to None), the RNG streams and the module's buffers (BatchNorm statistics) put back as they were — so the
training loop's first step uses the rebuilt buckets, as the uninterrupted run does. Collective: every rank of
the DDP group calls it, with an input of its usual shape. Call it after `load_latest` and before the loop.

Imports only the standard library and torch.
"""

from __future__ import annotations

from typing import Any

import torch

from vigil.recovery.checkpoint.staging import iter_tensors


def settle_ddp(model: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
    """One no-op iteration of the DDP `model` on `args`/`kwargs` (collective): its buckets rebuilt, nothing else
    changed — parameters, gradients (None after), buffers and RNG states are as before."""
    module = getattr(model, "module", model)
    buffers = {n: b.detach().clone() for n, b in module.named_buffers()}
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []  # type: ignore[no-untyped-call]
    with torch.random.fork_rng(devices=devices):
        out = model(*args, **kwargs)
        grads = [t for t in iter_tensors(out) if t.requires_grad]
        if not grads:
            raise ValueError("settle_ddp: the model's output holds no tensor that requires a gradient")
        torch.stack([t.sum() for t in grads]).sum().mul(0).backward()  # type: ignore[no-untyped-call]
    with torch.no_grad():
        for n, b in module.named_buffers():
            b.copy_(buffers[n])
    for p in model.parameters():
        p.grad = None
