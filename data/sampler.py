"""`ElasticSampler`: a map-style dataset's sample ids for this rank, every sample once per epoch on any world.

    sampler = ElasticSampler(len(dataset), batch_size=32, shard_size=1024, seed=0)
    state = {"train": TrainState(model, opt), "data": sampler}   # checkpointed with the model
    start = (ckpt.load_latest(state) or -1) + 1                  # restores the sampler too
    for epoch in range(sampler.epoch, epochs):
        sampler.set_epoch(epoch)
        for ids in sampler.batches():        # the same number of batches on every rank (static)
            train_step([dataset[i] for i in ids])   # a batch may be short or empty at the end
            maybe_checkpoint()

In balanced mode (`mode="balanced"`) a step is `world x batch_size` samples read as
micro-batches claimed by whichever rank is free, so a slow rank reads fewer:

        for step in sampler.steps():             # the same number of steps on every rank
            n = 0
            for ids in step:                     # micro-batches, claimed on demand: read each step to its end
                loss(model, [dataset[i] for i in ids]).backward()   # gradients accumulate
                n += len(ids)
            all_reduce(gradients, n)             # weight by the step's global sample count

`steps()` works in every mode (one batch per step in static and dynamic). A
`torch.utils.data.Sampler[int]`: iterating it yields this rank's ids of the rest of the
epoch (the batches, flattened). A DataLoader that prefetches indices runs ahead of the
steps; use `batches()` (or a loader without worker prefetch) so the checkpointed position
is the trained one. See `vigil.data.stream` for the segment, the modes and the guarantee.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

from torch.utils.data import Sampler

from vigil.data.dynamic import Store
from vigil.data.plan import EpochPlan, Piece
from vigil.data.stream import ElasticStream, Mode, Segment

PERMUTATIONS = 64  # shard orders kept: a rank reads a few shards at a time (every one ever read made it quadratic)


class ElasticSampler(Sampler[int]):
    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        *,
        shard_size: int = 1024,
        seed: int = 0,
        mode: Mode | str = Mode.STATIC,
        rank: int | None = None,
        world_size: int | None = None,
        store: Store | None = None,
        name: str = "data",
        micro_batch: int | None = None,
    ) -> None:
        super().__init__()
        self.plan = EpochPlan.even(num_samples, shard_size, seed=seed)
        self.stream = ElasticStream(self.plan, batch_size, mode=Mode(mode), rank=rank, world_size=world_size,
                                    store=store, name=name, micro_batch=micro_batch)  # fmt: skip
        self._perms: OrderedDict[tuple[int, int], list[int]] = OrderedDict()  # the shards read most recently

    @property
    def epoch(self) -> int:
        return self.stream.epoch

    @property
    def segment(self) -> Segment | None:
        """The world and the re-split work of the current segment (None before the first batch)."""
        return self.stream.segment

    def set_epoch(self, epoch: int) -> None:
        self.stream.set_epoch(epoch)

    def batches(self) -> Iterator[list[int]]:
        """This rank's batches of sample ids for the rest of the epoch."""
        yield from map(self._ids, self.stream.piece_batches())

    def steps(self) -> Iterator[Iterator[list[int]]]:
        """This rank's steps for the rest of the epoch, each an iterator of micro-batches of sample ids."""
        for step in self.stream.piece_steps():
            yield map(self._ids, step)

    def __iter__(self) -> Iterator[int]:
        for step in self.steps():
            for ids in step:
                yield from ids

    def _ids(self, pieces: list[Piece]) -> list[int]:
        ids: list[int] = []
        for p in pieces:
            ids.extend(self._permutation(p.shard)[p.start:p.stop])
        return ids

    def state_dict(self) -> dict[str, Any]:
        """The epoch's progress (`vigil.data.state`): the same on every rank after the same batches."""
        return self.stream.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.stream.load_state_dict(state_dict)

    def _permutation(self, shard: int) -> list[int]:
        key = (self.epoch, shard)
        if key in self._perms:
            self._perms.move_to_end(key)
            return self._perms[key]
        if len(self._perms) >= PERMUTATIONS:
            self._perms.popitem(last=False)
        self._perms[key] = perm = self.plan.permutation(self.epoch, shard)
        return perm
