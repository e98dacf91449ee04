"""`ShardReader`: an iterable (streaming) dataset read shard by shard, every sample once per epoch on any world.

    def open_shard(shard: int, start: int) -> Iterator[Sample]:   # e.g. one file per shard
        return itertools.islice(read_records(files[shard]), start, None)

    reader = ShardReader(open_shard, sizes=[count(f) for f in files], batch_size=32, seed=0)
    for batch in reader.batches():  # lists of samples, short or empty at the end
        ...

The shard sizes must be known (a shard's position is a sample count). Samples come in
each shard's storage order (`open_shard(shard, start)` must yield the shard from sample
`start`); the shard order is shuffled per epoch. A shard piece continued by the next batch
keeps its open iterator (in balanced mode, a later piece of the same shard skips forward
on it); a piece the rank did not finish is reopened at its position after a restart. State, modes and guarantee as `ElasticSampler` (`vigil.data.stream`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, Generic, TypeVar

from vigil.data.dynamic import Store
from vigil.data.plan import EpochPlan, Piece
from vigil.data.stream import ElasticStream, Mode, Segment

T = TypeVar("T")


class ShardReader(Generic[T]):
    def __init__(
        self,
        open_shard: Callable[[int, int], Iterator[T]],
        sizes: Sequence[int],
        batch_size: int,
        *,
        seed: int = 0,
        mode: Mode | str = Mode.STATIC,
        rank: int | None = None,
        world_size: int | None = None,
        store: Store | None = None,
        name: str = "data",
        micro_batch: int | None = None,
    ) -> None:
        self.open_shard = open_shard
        self._current: tuple[int, int, Iterator[T]] | None = None  # (shard, next position, its open iterator)
        self.plan = EpochPlan(tuple(sizes), seed, shuffle_within=False)
        self.stream = ElasticStream(self.plan, batch_size, mode=Mode(mode), rank=rank, world_size=world_size,
                                    store=store, name=name, micro_batch=micro_batch)  # fmt: skip

    @property
    def epoch(self) -> int:
        return self.stream.epoch

    @property
    def segment(self) -> Segment | None:
        return self.stream.segment

    def set_epoch(self, epoch: int) -> None:
        self.stream.set_epoch(epoch)

    def batches(self) -> Iterator[list[T]]:
        """This rank's batches of samples for the rest of the epoch."""
        self._current = None
        yield from map(self._read, self.stream.piece_batches())

    def steps(self) -> Iterator[Iterator[list[T]]]:
        """This rank's steps, each an iterator of micro-batches. In balanced mode a rank's micro-batches of a
        shard come at growing positions: it reads on through the shard, skipping the other ranks' records,
        so each rank reads every shard it takes a micro-batch of once (up to world x the data)."""
        self._current = None
        for step in self.stream.piece_steps():
            yield map(self._read, step)

    def __iter__(self) -> Iterator[T]:
        for step in self.steps():
            for batch in step:
                yield from batch

    def _read(self, pieces: list[Piece]) -> list[T]:
        batch: list[T] = []
        for p in pieces:
            current = self._current
            if current is not None and current[0] == p.shard and current[1] < p.start:
                deque(islice(current[2], p.start - current[1]), maxlen=0)  # skip the other ranks' micro-batches
                current = (p.shard, p.start, current[2])
            if current is None or current[:2] != (p.shard, p.start):
                current = (p.shard, p.start, iter(self.open_shard(p.shard, p.start)))
            got = list(islice(current[2], len(p)))
            if len(got) != len(p):
                raise ValueError(f"shard {p.shard} ended at {p.start + len(got)}, declared size {self.plan.size(p.shard)}")
            batch.extend(got)
            self._current = (p.shard, p.stop, current[2])
        return batch

    def state_dict(self) -> dict[str, Any]:
        return self.stream.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.stream.load_state_dict(state_dict)
