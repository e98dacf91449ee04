"""Phase 1 of a save: copy the state into host memory the training no longer touches.

`Stager.stage` turns the user's state (a mapping whose values may be `Stateful`s such as
modules, optimizers or `TrainState`) into a plain state dict and deep-copies it with
torch.distributed.checkpoint's `StateDictStager` (the engine behind its `DefaultStager`,
used directly: some torch releases' `DefaultStager` closes its engine after every stage,
which drops the cached buffers and makes the next stage of a CUDA state fail with
``KeyError: <class 'type'>``, seen on torch 2.11 on an H100):

* CPU tensors are copied into host buffers; on CUDA the buffers are pinned and the copies
  are issued non-blocking, then the device is synchronised once, so the call returns only
  when every byte is on the host;
* the buffers are cached per source storage and reused by the next save (the first save
  pays for allocating and, on CUDA, pinning them; later ones are a plain memcpy);
* storages shared by several tensors (tied weights, views) are copied once;
* non-tensor values (step counters, optimizer hyper-parameters) are deep-copied.

Guarantee: after `stage` returns, the staged copy is independent of the live state, so
training may update parameters while the copy is persisted. Because the buffers are
reused, a new staging must not start while the previous copy is still being persisted:
the `Checkpointer` stages only when its persister is idle.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint._state_dict_stager import StateDictStager
from torch.distributed.checkpoint.stateful import Stateful


@dataclass(frozen=True, kw_only=True)
class Staged:
    """A staged copy of the state: what the persister writes."""

    state_dict: dict[str, Any]
    nbytes: int
    seconds: float


def to_state_dict(state: Mapping[str, Any]) -> dict[str, Any]:
    """`state` with every `Stateful` value replaced by its ``state_dict()`` (like DCP does)."""
    return {str(k): (v.state_dict() if isinstance(v, Stateful) else v) for k, v in state.items()}


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The rank-local data of `t` (a DTensor's local shard; `t` itself otherwise)."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t  # DTensor.to_local() is a view of the shard


def iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a nested dict/list/tuple state dict (depth first)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from iter_tensors(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from iter_tensors(v)


def storage_bytes(obj: Any) -> int:
    """Bytes of the distinct storages behind the tensors of `obj` (what staging copies)."""
    seen: set[int] = set()
    total = 0
    for t in iter_tensors(obj):
        storage = local_tensor(t).untyped_storage()
        if storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


class Stager:
    """Copies state dicts into reused host buffers (pinned when staging from CUDA)."""

    def __init__(self, *, pin_memory: bool | None = None) -> None:
        cuda = torch.cuda.is_available()
        self.pinned = cuda if pin_memory is None else bool(pin_memory) and cuda
        # the persister is a thread of this process: no shared memory
        self._stager = StateDictStager(pin_memory=self.pinned, share_memory=False)

    def stage(self, state: Mapping[str, Any]) -> Staged:
        t0 = time.perf_counter()
        # device -> pinned host copies overlap (non-blocking); one synchronisation at the end
        staged = self._stager.stage(to_state_dict(state), non_blocking=self.pinned)
        if self.pinned:
            torch.cuda.synchronize()  # return only once every byte is on the host
        if not isinstance(staged, dict):
            raise TypeError(f"staging returned {type(staged).__name__}, expected a state dict")
        seconds = time.perf_counter() - t0
        return Staged(state_dict=staged, nbytes=storage_bytes(staged), seconds=seconds)

    def close(self) -> None:
        """Drop the cached host buffers (unpinning them on CUDA)."""
        self._stager.close()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
