"""`ElasticStream`: one rank's batches of an epoch, as pieces of shards, resumable on any world size.

A *segment* is the run of batches from one starting state on one world: it starts when
`piece_batches()` is called (after a restart, after `load_state_dict`, at a new epoch) and
deals the remaining pieces of the epoch over the ranks of this world —

* static: `split.assign`, the same deal on every rank; every rank takes `steps` batches
  (the longest share's count; a rank out of samples gets short or empty batches), so
  no message is sent and every rank knows what every rank has consumed;
* dynamic: each rank claims the next piece from the job store's counter when its batch
  needs more (`dynamic.Claims`); the segment ends when no rank got a sample in a step
  (one all-reduce per batch); `state_dict()` reads every rank's claims from the store;
* balanced: a step is world x batch_size samples of the remaining work, in order, read as
  micro-batches claimed from the job store's counter by whichever rank is free
  (`balanced.BalancedSteps`): a slow rank takes fewer. Read it with `piece_steps()`.

The state counts a batch as consumed once it has been handed out: checkpoint after the
step that used it and before taking the next, as the loop `for batch in ...: step(); save()`
does. Guarantee: along the sequence of committed steps (each resume starting from the
checkpoint of the last committed one), every sample of the epoch is handed out exactly
once; samples handed out after the last checkpoint are handed out again after a restart,
as the steps that used them are run again.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from vigil.data import balanced, dynamic, split
from vigil.data.plan import EpochPlan, Piece
from vigil.data.state import DataState


class Mode(enum.Enum):
    STATIC = "static"
    DYNAMIC = "dynamic"
    BALANCED = "balanced"


@dataclass(frozen=True)
class Segment:
    """What a segment started from: the world it runs on and the work it re-split."""

    world_size: int
    pieces: int
    samples: int  # samples left in the epoch at the segment's start
    in_flight: int  # shards that were read part-way before it (their rest is re-split)
    done: int = 0  # samples of the epoch read before it
    exact: bool = True  # what was read and what is dealt cover every sample of the epoch exactly once


class ElasticStream:
    def __init__(
        self,
        plan: EpochPlan,
        batch_size: int,
        *,
        mode: Mode = Mode.STATIC,
        rank: int | None = None,
        world_size: int | None = None,
        store: dynamic.Store | None = None,
        name: str = "data",
        micro_batch: int | None = None,
    ) -> None:
        if batch_size < 1 or (micro_batch is not None and micro_batch < 1):
            raise ValueError(f"batch_size {batch_size}, micro_batch {micro_batch}")
        distributed = dist.is_available() and dist.is_initialized()
        self.plan, self.batch_size, self.mode, self.name = plan, batch_size, mode, name
        self.rank = rank if rank is not None else (dist.get_rank() if distributed else 0)
        self.world_size = world_size if world_size is not None else (dist.get_world_size() if distributed else 1)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside a world of {self.world_size}")
        self.micro_batch = micro_batch or max(1, batch_size // 8)  # balanced: samples per claim
        self._store = store
        self._base = DataState()
        self._streams: list[list[Piece]] | None = None  # static: every rank's share; balanced: all in order
        self._claims: dynamic.Claims | None = None  # dynamic: this rank's claims in the segment
        self._batches = 0
        self.segment: Segment | None = None

    @property
    def epoch(self) -> int:
        return self._base.epoch

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning (no-op when it is the current one: a resumed epoch goes on)."""
        if epoch != self._base.epoch:
            self._reset(DataState(epoch))

    def state(self) -> DataState:
        """The epoch's progress after the batches handed out so far (never a collective)."""
        if self._streams is not None:
            counts = [split.consumed(s, self._batches * self._per_step) for s in self._streams]
            return self._base.after(self.plan, [c for share in counts for c in share])
        if self._claims is not None:
            everyone = self._claims.everyone(self.world_size)
            return self._base.after(self.plan, dynamic.consumed_by_all(everyone, self._batches * self.batch_size))
        return self._base

    def state_dict(self) -> dict[str, Any]:
        return self.state().to_dict()

    def load_state_dict(self, doc: Mapping[str, Any]) -> None:
        self._reset(DataState.from_dict(doc, self.plan))

    def piece_batches(self) -> Iterator[list[Piece]]:
        """This rank's batches for the rest of the epoch, each a list of shard pieces (at most batch_size)."""
        if self.mode is Mode.BALANCED:
            raise ValueError("a balanced step is read as micro-batches: iterate piece_steps() (steps())")
        pieces, shares = self._begin()
        if self.mode is Mode.STATIC:
            yield from self._static(shares)
        else:
            yield from self._dynamic(pieces)

    def piece_steps(self) -> Iterator[Iterator[list[Piece]]]:
        """This rank's steps for the rest of the epoch, each an iterator of micro-batches (lists of pieces):
        one batch per step in static and dynamic mode, micro-batches claimed on demand in balanced mode."""
        if self.mode is not Mode.BALANCED:
            yield from (iter([batch]) for batch in self.piece_batches())
            return
        pieces, _ = self._begin()
        store = self._store if self._store is not None else dynamic.default_store()
        steps = balanced.BalancedSteps(store, dynamic.segment_key(self.name), pieces, world_size=self.world_size,
                                       step_samples=self._per_step, micro=self.micro_batch)
        self._streams = [pieces]
        for k, step in enumerate(steps):
            self._batches = k + 1
            yield step

    def _begin(self) -> tuple[list[Piece], list[list[Piece]]]:
        """Start a segment from the current state: the remaining pieces and how they are dealt."""
        self._reset(self.state())
        pieces = self._base.remaining(self.plan)
        shares = split.assign(pieces, self.world_size) if self.mode is Mode.STATIC else [pieces]
        base, sizes = self._base, self.plan.sizes
        read = [(s, 0, sizes[s]) for s in base.done] + [(s, 0, o) for s, o in base.offsets.items()]
        self.segment = Segment(self.world_size, len(pieces), sum(len(p) for p in pieces), len(base.offsets),
                               done=sum(b - a for _, a, b in read), exact=split.tiles(sizes, read, shares))
        return pieces, shares

    def _static(self, shares: list[list[Piece]]) -> Iterator[list[Piece]]:
        self._streams = shares
        mine = self._streams[self.rank]
        at = split.starts(mine)
        for k in range(split.steps(self._streams, self.batch_size)):
            batch = split.take_at(mine, at, k * self.batch_size, self.batch_size)
            self._batches = k + 1
            yield batch

    def _dynamic(self, pieces: list[Piece]) -> Iterator[list[Piece]]:
        store = self._store if self._store is not None else dynamic.default_store()
        claims = dynamic.Claims(store, dynamic.segment_key(self.name), pieces, self.rank)
        self._claims = claims
        exhausted, k = False, 0
        while True:
            want = (k + 1) * self.batch_size
            while not exhausted and sum(len(p) for p in claims.taken) < want:
                exhausted = claims.claim() is None
            batch = split.take(claims.taken, k * self.batch_size, self.batch_size)
            anyone = torch.tensor([sum(len(p) for p in batch)], device=_collective_device())
            dist.all_reduce(anyone, op=dist.ReduceOp.MAX)
            if int(anyone.item()) == 0:
                return
            k += 1
            self._batches = k
            yield batch

    def _reset(self, base: DataState) -> None:
        self._base, self._streams, self._claims, self._batches = base, None, None, 0

    @property
    def _per_step(self) -> int:
        """Samples of each stream per batch: a rank's batch (static), the whole step's (balanced)."""
        return self.world_size * self.batch_size if self.mode is Mode.BALANCED else self.batch_size


def _collective_device() -> torch.device:
    """Where the default group's collectives take their tensors (NCCL: this rank's GPU)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
