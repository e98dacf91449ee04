"""The process groups the checkpointer uses, and how ranks agree before acting.

Three groups, created collectively when the `Checkpointer` is built (every rank must
build it at the same point, like any `new_group` call):

* ``persist``: a gloo group over the world, used only by the persister thread for
  `dcp.save`. Collectives from two threads on one group would interleave, so the
  training's own groups are never touched from the background.
* ``control``: a gloo group over the world, used only from the calling (training)
  thread: one small all-gather per save decides together whether to save (all ranks
  idle and staged, same step), carries rank 0's directory token and sets the snapshot
  interval every rank uses until the next save (the largest proposed); restore agrees
  on the candidate list and on success through it.
* ``dp``: this rank's data-parallel replicas (ranks holding identical state), from the
  configured `dp_group`. Restore reads once per such group and broadcasts over it.

Not distributed (no initialised default group): one rank, no groups, no collectives.
Every collective has the groups' timeout (`collective_timeout_s`), so a dead peer is a
failed save after that long, never a hang forever.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from vigil.recovery.checkpoint.config import DPGroupSpec, rank_lists
from vigil.recovery.checkpoint.errors import ConfigError

READY, BUSY, NOT_STAGED = 0, 1, 2  # a rank's status in the save agreement


@dataclass(frozen=True, kw_only=True)
class Agreement:
    """What every rank said before a save: status and step per rank, rank 0's token."""

    statuses: tuple[int, ...]
    steps: tuple[int, ...]
    token: int
    snapshot_every: int = 1  # the largest interval any rank proposed (`memory.Snapshots.proposal`)

    @property
    def go(self) -> bool:
        return all(s == READY for s in self.statuses) and len(set(self.steps)) == 1


@dataclass(frozen=True, kw_only=True)
class Topology:
    rank: int
    world_size: int
    persist_pg: Any = None
    control_pg: Any = None
    dp_pg: Any = None  # None: no replicas to share with, every rank reads its own state
    dp_ranks: tuple[int, ...] = ()

    @property
    def distributed(self) -> bool:
        return self.control_pg is not None

    @property
    def reader(self) -> int:
        """The global rank that reads from storage for this rank's DP group."""
        return min(self.dp_ranks) if self.dp_pg is not None else self.rank

    @property
    def is_reader(self) -> bool:
        return self.reader == self.rank

    # ---- agreement, on the calling thread (control group) -------------------------------
    def agree(self, step: int, status: int, snapshot_every: int = 1) -> Agreement:
        """All-gather (status, step, token, proposed snapshot interval): one small collective per save."""
        token = secrets.randbits(32) if self.rank == 0 else 0
        if not self.distributed:
            return Agreement(statuses=(status,), steps=(step,), token=token, snapshot_every=snapshot_every)
        mine = torch.tensor([status, step, token, snapshot_every], dtype=torch.int64)
        out = [torch.zeros(4, dtype=torch.int64) for _ in range(self.world_size)]
        dist.all_gather(out, mine, group=self.control_pg)
        return Agreement(
            statuses=tuple(int(t[0]) for t in out), steps=tuple(int(t[1]) for t in out), token=int(out[0][2]),
            snapshot_every=max(int(t[3]) for t in out),
        )

    def all_true(self, flag: bool) -> bool:
        """True when `flag` is true on every rank."""
        if not self.distributed:
            return flag
        t = torch.tensor([1 if flag else 0], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.control_pg)
        return bool(t.item())

    def gather_rows(self, row: Sequence[int]) -> list[list[int]]:
        """Every rank's `row` (same length on every rank), in rank order: one all-gather."""
        if not self.distributed:
            return [list(row)]
        mine = torch.tensor(list(row), dtype=torch.int64)
        out = [torch.zeros(len(row), dtype=torch.int64) for _ in range(self.world_size)]
        dist.all_gather(out, mine, group=self.control_pg)
        return [[int(v) for v in t] for t in out]

    def from_rank0(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (pickled; for small objects)."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.control_pg)
        return box[0]


def build_topology(spec: DPGroupSpec, timeout_s: float) -> Topology:
    """Create the checkpointer's groups; collective when torch.distributed is initialised."""
    if not (dist.is_available() and dist.is_initialized()):
        if isinstance(spec, Sequence) and not isinstance(spec, str):
            _check_tiling(rank_lists(spec), 1)
        return Topology(rank=0, world_size=1)
    rank, world = dist.get_rank(), dist.get_world_size()
    timeout = timedelta(seconds=timeout_s)
    lists = rank_lists(spec) if isinstance(spec, Sequence) and not isinstance(spec, str) else None
    if lists is not None:
        _check_tiling(lists, world)
    persist_pg = dist.new_group(backend="gloo", timeout=timeout, group_desc="vigil_ckpt_persist")
    control_pg = dist.new_group(backend="gloo", timeout=timeout, group_desc="vigil_ckpt_control")
    dp_pg: Any = None
    dp_ranks: tuple[int, ...] = ()
    if spec == "world":
        dp_pg, dp_ranks = dist.group.WORLD, tuple(range(world))
    elif lists is not None:
        dp_pg, _ = dist.new_subgroups_by_enumeration(  # type: ignore[no-untyped-call]
            lists, timeout=timeout, group_desc="vigil_ckpt_dp"
        )
        dp_ranks = tuple(next(g for g in lists if rank in g))
    elif spec is not None:
        if not isinstance(spec, dist.ProcessGroup):
            raise ConfigError(f"dp_group: expected a ProcessGroup, rank lists, 'world' or None, got {spec!r}")
        dp_pg, dp_ranks = spec, tuple(sorted(dist.get_process_group_ranks(spec)))
        if rank not in dp_ranks:
            raise ConfigError(f"dp_group: rank {rank} is not a member of the given group {dp_ranks}")
    return Topology(
        rank=rank,
        world_size=world,
        persist_pg=persist_pg,
        control_pg=control_pg,
        dp_pg=dp_pg,
        dp_ranks=dp_ranks,
    )


def _check_tiling(lists: list[list[int]], world: int) -> None:
    flat = sorted(r for g in lists for r in g)
    if flat != list(range(world)):
        raise ConfigError(f"dp_group: the DP groups {lists} must name every rank 0..{world - 1} exactly once")
