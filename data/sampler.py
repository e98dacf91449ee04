"""`ElasticSampler`: a map-style dataset's sample ids for this rank, every sample once per epoch on any world.

    sampler = ElasticSampler(len(dataset), batch_size=32, shard_size=1024, seed=0)
    state = {"train": TrainState(model, opt), "data": sampler}   # checkpointed with the model
    start = (ckpt.load_latest(state) or -1) + 1                  # restores the sampler too
    for epoch in range(sampler.epoch, epochs):
        sampler.set_epoch(epoch)
        for ids in sampler.batches():        # the same number of batches on every rank (static)
            train_step([dataset[i] for i in ids])   # a batch may be short or empty at the end
            maybe_checkpoint()

A `torch.utils.data.Sampler[int]`: iterating it yields this rank's ids of the rest of the
epoch (the batches, flattened). A DataLoader that prefetches indices runs ahead of the
steps; use `batches()` (or a loader without worker prefetch) so the checkpointed position
is the trained one. See `vigil.data.stream` for the segment, the modes and the guarantee.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from torch.utils.data import Sampler

from vigil.data.dynamic import Store
from vigil.data.plan import EpochPlan
from vigil.data.stream import ElasticStream, Mode, Segment


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
    ) -> None:
        super().__init__()
        self.plan = EpochPlan.even(num_samples, shard_size, seed=seed)
        self.stream = ElasticStream(self.plan, batch_size, mode=Mode(mode), rank=rank, world_size=world_size,
                                    store=store, name=name)  # fmt: skip
        self._perms: dict[tuple[int, int], list[int]] = {}

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
        for pieces in self.stream.piece_batches():
            ids: list[int] = []
            for p in pieces:
                ids.extend(self._permutation(p.shard)[p.start:p.stop])
            yield ids

    def __iter__(self) -> Iterator[int]:
        for ids in self.batches():
            yield from ids

    def state_dict(self) -> dict[str, Any]:
        """The epoch's progress (`vigil.data.state`): the same on every rank after the same batches."""
        return self.stream.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.stream.load_state_dict(state_dict)

    def _permutation(self, shard: int) -> list[int]:
        key = (self.epoch, shard)
        if key not in self._perms:
            self._perms = {k: v for k, v in self._perms.items() if k[0] == self.epoch}
            self._perms[key] = self.plan.permutation(self.epoch, shard)
        return self._perms[key]
