"""The epoch plan: a dataset cut into shards, a seeded shard order, and each shard's sample order.

A dataset is cut into contiguous shards of known sizes (`EpochPlan.even`: `num_samples` in
shards of `shard_size`, the last shorter). Epoch `e` visits the shards in an order shuffled by `(seed, e)`; inside a
shard the samples come in an order shuffled by `(seed, e, shard)` (or in storage order
for streaming shards, `shuffle_within=False`). Everything here is a pure function of the
plan's numbers: every rank of every run, of any world size, computes the same plan, which
is what lets the remaining work of an epoch be re-split without asking anyone.

Guarantees: `order(e)` is a permutation of the shard ids; `permutation(e, shard)` is a
permutation of the shard's sample ids.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate


@dataclass(frozen=True)
class Piece:
    """The samples at positions [start, stop) of one shard's order: a unit of work handed to one rank."""

    shard: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class EpochPlan:
    """Shards of known sizes and their seeded orders; sample ids run on from shard to shard."""

    sizes: tuple[int, ...]
    seed: int = 0
    shuffle_within: bool = True

    def __post_init__(self) -> None:
        if any(s < 1 for s in self.sizes):
            raise ValueError("every shard needs at least one sample")

    @classmethod
    def even(cls, num_samples: int, shard_size: int, *, seed: int = 0, shuffle_within: bool = True) -> EpochPlan:
        """`num_samples` cut into shards of `shard_size` (the last may be shorter)."""
        if num_samples < 0 or shard_size < 1:
            raise ValueError(f"need num_samples >= 0 and shard_size >= 1, got {num_samples}, {shard_size}")
        full, rest = divmod(num_samples, shard_size)
        return cls((shard_size,) * full + ((rest,) if rest else ()), seed, shuffle_within)

    @property
    def num_shards(self) -> int:
        return len(self.sizes)

    @property
    def num_samples(self) -> int:
        return sum(self.sizes)

    def size(self, shard: int) -> int:
        return self.sizes[shard]

    def first(self, shard: int) -> int:
        """The sample id the shard starts at."""
        return self._starts[shard]

    @cached_property
    def _starts(self) -> list[int]:
        return [0, *accumulate(self.sizes)]

    def order(self, epoch: int) -> list[int]:
        shards = list(range(self.num_shards))
        random.Random(f"vigil.data/{self.seed}/{epoch}").shuffle(shards)
        return shards

    def permutation(self, epoch: int, shard: int) -> list[int]:
        """Sample ids of `shard` in the order the epoch reads them."""
        first = self.first(shard)
        ids = list(range(first, first + self.size(shard)))
        if self.shuffle_within:
            random.Random(f"vigil.data/{self.seed}/{epoch}/{shard}").shuffle(ids)
        return ids
