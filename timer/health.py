"""Training-health signals of one step: loss, local gradient norm, non-finite count, update ratio.

    with t.step() as s:
        loss = model(batch); loss.backward()
        norm, bad = grad_stats(model.parameters())     # before the all-reduce: this rank's own gradients
        t.health(loss=loss, grad_norm=norm, nonfinite=bad)
        sync(model); opt.step()

Each value may be a Python number or a 0-dim tensor. The training thread never synchronises the
device for them: a CUDA tensor is copied to pinned host memory with ``non_blocking=True`` on the
current stream when it is given (inside the step, so before the step's end event), and read on
the spool thread once the timer's events say the step completed, as the step's timings are. A
CPU tensor is read at once (no device to wait for). `grad_stats` and `update_ratio` compute on
the device and return tensors, never Python numbers.

Rendering (`rendered`) keeps the contract's bounds: a non-finite loss, norm or ratio is sent as
null, and a non-finite loss adds one to `nonfinite` (which otherwise counts what the caller
passed: the gradients' non-finite values, as `grad_stats` counts them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported when a value is captured: `import vigil.timer` stays stdlib-only
    import torch

FIELDS = ("loss", "grad_norm", "nonfinite", "update_ratio")
_FLOAT_MAX = 1.7976931348623157e308
_U32_MAX = 2**32 - 1


def capture(value: Any) -> Any:
    """What to keep of a value until the step is rendered: a number, or a tensor that needs no sync to read later."""
    if value is None or not hasattr(value, "detach"):
        return value
    import torch

    t = value.detach().reshape(-1)[:1]  # a 0-dim (or 1-element) value: the first element
    if t.device.type == "cpu":
        return t.item() if t.numel() else None
    return t.to("cpu", torch.float64, non_blocking=True)  # pinned, ordered before the step's end event


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value.item()) if hasattr(value, "item") else float(value)
    except (TypeError, ValueError, RuntimeError):
        return None


def rendered(health: dict[str, Any]) -> dict[str, Any]:
    """The step record's health fields from the captured values (absent keys: the caller gave none)."""
    out: dict[str, Any] = {}
    loss = _number(health.get("loss"))
    bad_loss = loss is not None and not math.isfinite(loss)
    if "loss" in health:
        out["loss"] = None if loss is None or bad_loss else loss
    for name in ("grad_norm", "update_ratio"):
        if name in health:
            v = _number(health[name])
            out[name] = v if v is not None and math.isfinite(v) and 0 <= v <= _FLOAT_MAX else None
    count = _number(health.get("nonfinite"))
    if "nonfinite" in health or bad_loss:
        n = int(count) if count is not None and math.isfinite(count) and count >= 0 else 0
        out["nonfinite"] = min(_U32_MAX, n + int(bad_loss))
    return out


def grad_stats(params: Iterable[torch.nn.Parameter | torch.Tensor],
               exact: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(L2 norm of the gradients, count of their non-finite values), both 0-dim tensors on the gradients' device.

    Call it after backward and before the gradients are all-reduced: the norm is this rank's own. Counting every
    value costs ~15x the norm, so it is counted only where the norm says there is something to count: on the CPU
    (reading the norm costs no sync) the exact count when the norm is not finite, else 0; on a device, without a
    sync, the number of gradient tensors whose norm is not finite (a lower bound, 0 exactly when all is finite),
    or every value's count with `exact` (the full cost, on the device)."""
    import torch

    grads = [p.grad.detach() for p in params if p.grad is not None]
    if not grads:
        zero = torch.zeros(())
        return zero, zero.to(torch.int64)
    norms = torch.stack([torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads])
    norm = torch.linalg.vector_norm(norms)
    on_cpu = all(g.device.type == "cpu" for g in grads)
    if exact or (on_cpu and not bool(torch.isfinite(norm))):
        bad = torch.stack([(~torch.isfinite(g)).sum() for g in grads]).sum()
    elif on_cpu:
        bad = torch.zeros((), dtype=torch.int64)
    else:
        bad = (~torch.isfinite(norms)).sum()
    return norm, bad


def update_ratio(before: Sequence[torch.Tensor], after: Sequence[torch.Tensor]) -> torch.Tensor:
    """||after - before|| / ||after|| over every parameter, a 0-dim tensor (the parameters' device).

    `before` is the caller's copy of the parameters from before the optimizer step."""
    import torch

    if not after:
        return torch.zeros(())
    delta = torch.stack([torch.linalg.vector_norm(a.detach().float() - b.detach().float())
                         for a, b in zip(after, before, strict=True)])
    size = torch.stack([torch.linalg.vector_norm(a.detach(), dtype=torch.float32) for a in after])
    ratio: torch.Tensor = torch.linalg.vector_norm(delta) / torch.linalg.vector_norm(size).clamp_min(1e-30)
    return ratio
