"""Restore: load the newest complete checkpoint, reading once per data-parallel group.

Collective: every rank calls it at the same point. In order:

1. Rank 0 lists the committed checkpoints (`layout.Layout.committed`, highest step first)
   and sends the list to every rank, so all ranks try the same ones; the others do not list.
   Before a checkpoint is opened, rank 0 re-hashes its files against the commit marker
   (`layout.Layout.verify`) and ranks agree: a mismatch is never opened (DCP's metadata is
   a pickle), it is reported (`RestoreReport.rejected`) and the next older one is tried.
2. Only the reader of each DP group (its lowest rank) opens the checkpoint: a local-only
   `dcp.load` (``no_dist=True``) of its own state dict, which reads DCP's metadata and
   exactly the shards its state needs (the shards every member of the group shares).
   Without a DP group, every rank is its own reader. Ranks then agree (one all-reduce):
   if any reader failed, all move on to the next older checkpoint.
3. In each DP group the reader sends the group its state layout and non-tensor values
   (one object broadcast); every member checks its own state has the same tensors
   (paths, shapes, dtypes) and ranks agree again, so a misconfigured `dp_group` is an
   error everywhere instead of silently wrong weights. Then the tensors are broadcast
   over the DP group: tensors of 1 MiB and more straight into the live tensors, smaller
   ones packed into byte buckets (fewer collectives); DTensors by their local shard.
4. Every rank hands the loaded values to its `Stateful`s (``load_state_dict``) or replaces
   the plain values, like `dcp.load`.

Returns None when no complete checkpoint exists; raises `RestoreError` (on every rank)
when some exist but none could be loaded.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.checkpoint.storage import StorageReader

from vigil.recovery.checkpoint.coordination import Topology
from vigil.recovery.checkpoint.errors import RestoreError
from vigil.recovery.checkpoint.layout import Commit, Layout
from vigil.recovery.checkpoint.persist import describe
from vigil.recovery.checkpoint.staging import local_tensor, to_state_dict

log = logging.getLogger("vigil.recovery.checkpoint")
BUCKET_BYTES = 16 << 20  # small tensors travel packed in buckets of up to this many bytes
DIRECT_BYTES = 1 << 20  # larger tensors are broadcast straight into the live tensor (no copies)
LeafPath = tuple[Any, ...]


@dataclass(frozen=True, kw_only=True)
class RestoreReport:
    step: int
    path: str
    read_storage: bool  # this rank read from storage (False: it got the state by broadcast)
    seconds: float
    failed: tuple[str, ...] = ()  # newer checkpoints that could not be loaded
    rejected: tuple[tuple[int, str, str], ...] = ()  # (step, path, why) of newer ones that failed verification
    source: str = "persisted"  # "memory": this rank's in-memory snapshot; "peer": a copy from another host


def load_latest(
    state: MutableMapping[str, Any],
    *,
    topology: Topology,
    layout: Layout,
    reader_factory: Callable[[str], StorageReader],
    at_most: int | None = None,
) -> RestoreReport | None:
    """The newest complete checkpoint (none newer than step `at_most`) loaded into `state`: see the module."""
    t0 = time.monotonic()
    listing: tuple[str, Any] = ("ok", [])
    commits: dict[str, Commit] = {}
    if topology.rank == 0:
        try:
            commits = {c.path: c for c in layout.committed()}
            if old := layout.unverifiable():
                log.warning("%d checkpoints under %s have a commit marker without digests (an older vigil): "
                            "they are not restored: %s", len(old), layout.store.root, ", ".join(old[:5]))
            listing = ("ok", [(c.path, c.step) for c in commits.values() if at_most is None or c.step <= at_most])
        except Exception as exc:
            listing = ("error", describe(exc))
    status, payload = topology.from_rank0(listing)
    if status != "ok":
        raise RestoreError(f"cannot list checkpoints under {layout.store.root}: {payload}")
    if not payload:
        return None
    sd = to_state_dict(state)
    failed: list[str] = []
    rejected: list[tuple[int, str, str]] = []
    for path, step in payload:
        error = layout.verify(commits[path]) if topology.rank == 0 else ""
        if not topology.all_true(not error):
            log.error("checkpoint %s failed verification (%s); trying an older one", path, error or "on rank 0")
            failed.append(f"{path}: {error or 'failed verification on rank 0'}")
            rejected.append((int(step), str(path), error or "failed verification on rank 0"))
            continue
        if topology.is_reader:
            try:
                with warnings.catch_warnings():
                    # DCP warns that no_dist means "single process": a local read is what is meant here
                    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
                    dcp_load(sd, storage_reader=reader_factory(path), no_dist=True)
            except (Exception, CheckpointException) as exc:
                error = describe(exc)
        if not topology.all_true(not error):
            log.warning(
                "checkpoint %s could not be loaded (%s); trying an older one", path, error or "on a peer"
            )
            failed.append(f"{path}: {error or 'failed on another rank'}")
            continue
        share_with_dp_group(sd, topology)
        for key, value in state.items():
            if isinstance(value, Stateful):
                value.load_state_dict(sd[key])
            else:
                state[key] = sd[key]
        return RestoreReport(step=int(step), path=str(path), read_storage=topology.is_reader,
                             seconds=time.monotonic() - t0, failed=tuple(failed),
                             rejected=tuple(rejected))  # fmt: skip
    raise RestoreError(
        f"no committed checkpoint under {layout.store.root} could be loaded: {'; '.join(failed)}",
        rejected=tuple(rejected),
    )


def share_with_dp_group(sd: dict[str, Any], topology: Topology) -> None:
    """Broadcast the reader's loaded `sd` to the rest of its DP group, in place."""
    if topology.dp_pg is None or len(topology.dp_ranks) < 2:
        topology.all_true(True)  # the layout agreement below is world-wide: take part
        return
    leaves = list(walk(sd))
    tensors = [(p, local_tensor(v)) for p, v in leaves if isinstance(v, torch.Tensor)]
    objects = [(p, v) for p, v in leaves if not isinstance(v, torch.Tensor)]
    layout = [(p, tuple(t.shape), str(t.dtype)) for p, t in tensors], [p for p, _ in objects]
    box: list[Any] = [(layout, [v for _, v in objects])] if topology.is_reader else [None]
    dist.broadcast_object_list(box, src=topology.reader, group=topology.dp_pg)
    their_layout, values = box[0]
    same = their_layout == layout
    if not topology.all_true(same):
        raise RestoreError(
            "data-parallel replicas disagree on the state layout (tensor names, shapes or dtypes): "
            "is dp_group right? FSDP/ZeRO state is sharded across data parallelism and needs dp_group=None"
        )
    with torch.no_grad():
        _broadcast_tensors([t for _, t in tensors], topology)
    if not topology.is_reader:
        for (path, _), value in zip(objects, values, strict=True):
            _assign(sd, path, value)


def walk(obj: Any, path: LeafPath = ()) -> Iterator[tuple[LeafPath, Any]]:
    """Leaves of nested dicts and lists, in an order every replica agrees on (sorted keys)."""
    if isinstance(obj, dict):
        for key in sorted(obj, key=lambda k: (type(k).__name__, str(k))):
            yield from walk(obj[key], (*path, key))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from walk(v, (*path, i))
    else:
        yield path, obj


def _assign(root: Any, path: LeafPath, value: Any) -> None:
    parent = root
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value


def _broadcast_tensors(tensors: list[torch.Tensor], topology: Topology) -> None:
    src, group, receiving = topology.reader, topology.dp_pg, not topology.is_reader
    bucket: list[torch.Tensor] = []
    size = 0

    def flush() -> None:
        nonlocal bucket, size
        if bucket:
            flat = torch.cat([_as_bytes(t) for t in bucket])
            dist.broadcast(flat, src=src, group=group)
            if receiving:
                offset = 0
                for t in bucket:
                    _copy_bytes_into(t, flat[offset : offset + _nbytes(t)])
                    offset += _nbytes(t)
        bucket, size = [], 0

    for t in tensors:
        n = _nbytes(t)
        if n == 0:
            continue
        if n >= DIRECT_BYTES:
            flush()
            if t.is_contiguous():
                dist.broadcast(_as_bytes(t), src=src, group=group)  # straight into the live tensor
            else:
                tmp = t.contiguous()
                dist.broadcast(_as_bytes(tmp), src=src, group=group)
                if receiving:
                    t.copy_(tmp)
            continue
        if bucket and (size + n > BUCKET_BYTES or bucket[0].device != t.device):
            flush()
        bucket.append(t)
        size += n
    flush()


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A flat uint8 view of contiguous `t` (a copy when `t` is not contiguous)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def _copy_bytes_into(t: torch.Tensor, data: torch.Tensor) -> None:
    if t.is_contiguous():
        t.reshape(-1).view(torch.uint8).copy_(data)
    else:
        tmp = torch.empty_like(t, memory_format=torch.contiguous_format)
        tmp.reshape(-1).view(torch.uint8).copy_(data)
        t.copy_(tmp)
