"""Replica digests: a 64-bit, order-sensitive fingerprint of a rank's parameter shard, computed where it lives.

    with t.step() as s:
        ...; opt.step()
        t.digest(model.parameters())          # every `digest_every` steps (TimerConfig), else nothing

Data-parallel replicas of one shard (same pp/tp coordinates) hold bitwise equal parameters after each optimizer step
(a flat all-reduce sums in the same order everywhere): the analyzer's replica detector (analyzer/detect/replicas.py)
compares their digests and a majority names the odd one. That is silent data corruption found without a NaN.

The digest (`param_digest`) reads each tensor's raw words (its bytes viewed as int32, or int16 for 2-byte types),
as rows of `WIDTH` words. Each row gives one 64-bit value: its xor (`torch.hash_tensor`, one pass in C/CUDA, where
torch has it) or, on older torch, the sum of its words times odd per-column weights. The tensor's digest is the sum of
its row values times odd per-row weights, modulo 2**64. A flip of any one bit b changes one row value by +-2**b (or
2**b * odd), and the digest by that times an odd weight: never 0 modulo 2**64, so every single-bit flip is seen.
Order: words moved between rows change the digest (unless equal); within one row of 4096 words the xor path does
not see a permutation (the weighted-sum path does). Tensors' digests are chained in order (``h = h * PRIME + d``).
It all runs on the tensors' device (int64 arithmetic wraps alike on CPU and CUDA) and returns a 0-dim int64 tensor:
no sync on the training thread; the timer reads it after the step's own events completed. Every rank of a job must
run the same torch (the two paths give different digests). Extra memory: one int64 per row (1/1024 of the
shard) on the xor path; `CHUNK_ROWS` rows widened at once on the other.

Cost on the CPU (bench/RESULTS.md, "replica digest"): the default interval keeps it near 1 % of a step.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

WIDTH = 4096  # words per row
CHUNK_ROWS = 1024  # rows widened at once on the path without torch.hash_tensor (16 MiB of int32, 32 MiB widened)
PRIME = 1099511628211  # FNV-1a's 64-bit prime: chains the tensors' digests in order
DEFAULT_EVERY = 50  # steps between digests when TimerConfig.digest_every is not set (bench/RESULTS.md)
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64: spreads the position weights over all 64 bits


def _weights(n: int, device: Any, salt: int) -> torch.Tensor:
    """n odd int64 weights, one per position, different for every position (and per salt)."""
    import torch

    return (torch.arange(n, dtype=torch.int64, device=device) * _GOLDEN + salt) | 1


def _words(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bytes as a flat integer tensor (int32, or int16 for 2-byte types, uint8 for 1-byte)."""
    import torch

    flat = t.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    size = flat.element_size()
    if size >= 4:
        return flat.view(torch.int32)
    if size == 2:
        return flat.view(torch.int16)
    return flat.view(torch.uint8)


def _rows(words: torch.Tensor) -> torch.Tensor:
    """One int64 per row of `words` ([rows, k]): the row's xor (torch.hash_tensor) or its position-weighted sum."""
    import torch

    hashed = getattr(torch, "hash_tensor", None)
    if hashed is not None:
        out: torch.Tensor = hashed(words, dim=1).view(torch.int64)
        return out
    col = _weights(words.shape[1], words.device, 0x5851F42D)
    parts = [(words[i:i + CHUNK_ROWS].to(torch.int64) * col).sum(1) for i in range(0, words.shape[0], CHUNK_ROWS)]
    return torch.cat(parts)


def tensor_digest(t: torch.Tensor) -> torch.Tensor:
    """One tensor's digest, a 0-dim int64 tensor on its device (see the module docstring)."""
    import torch

    words = _words(t)
    n = words.numel()
    full = n - n % WIDTH
    rows = _rows(words[:full].view(-1, WIDTH)) if full else words.new_zeros((0,), dtype=torch.int64)
    if n > full:  # the tail: a row of its own, after the full ones
        rows = torch.cat([rows, _rows(words[full:].view(1, -1))])
    return (rows * _weights(rows.numel(), words.device, n)).sum() + n


def param_digest(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """The digest of every tensor in order (the rank's parameter shard), a 0-dim int64 tensor on their device."""
    import torch

    h: torch.Tensor | None = None
    for p in params:
        d = tensor_digest(p)
        h = d if h is None else h.to(d.device) * PRIME + d
    return h if h is not None else torch.zeros((), dtype=torch.int64)


def capture(value: Any) -> Any:
    """What to keep of a digest until the step is rendered: an int, or an int64 CPU copy that needs no sync."""
    if value is None or not hasattr(value, "detach"):
        return None if value is None else int(value)
    import torch

    t = value.detach().reshape(-1)[:1]
    if t.device.type == "cpu":
        return int(t.item()) if t.numel() else None
    return t.to("cpu", torch.int64, non_blocking=True)


def rendered(value: Any) -> int | None:
    """The digest as the step record carries it: a signed 64-bit integer (None: none or unreadable)."""
    try:
        v = int(value.item()) if hasattr(value, "item") else int(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return (v + 2**63) % 2**64 - 2**63  # into int64, whatever the source
