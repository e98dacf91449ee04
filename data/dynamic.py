"""Dynamic sharding: pieces handed out on demand through the job's rendezvous store (DLRover's idea).

Every rank of a segment sees the same list of remaining pieces; a rank that needs work
takes the next one with `store.add(key, 1)`, an atomic counter on the job's TCPStore (the
default process group's store), so each piece goes to exactly one rank and a slower rank
simply takes fewer. `key` is fresh per segment (rank 0 draws it and broadcasts it), so a
restart that reuses torchrun's store never sees an old counter.

What each rank read is known only to that rank: `gather` collects every rank's claims and
committed sample count (one `all_gather_object` — a collective, so every rank calls it at
the same point, as the checkpointer's save does) and returns them as per-piece counts.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Protocol

import torch.distributed as dist

from vigil.data.plan import Piece
from vigil.data.split import consumed


class Store(Protocol):
    def add(self, key: str, amount: int) -> int: ...


def default_store() -> Store:
    """The default process group's store (torchrun's rendezvous store, under the group's prefix)."""
    store: Store = dist.distributed_c10d._get_default_store()
    return store


def segment_key(name: str) -> str:
    """A counter key every rank agrees on, new for every segment (rank 0 draws it)."""
    box: list[Any] = [f"vigil.data/{name}/{uuid.uuid4().hex}" if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return str(box[0])


class Claims:
    """This rank's pieces taken from a shared counter, in the order it took them."""

    def __init__(self, store: Store, key: str, pieces: Sequence[Piece]) -> None:
        self.store, self.key, self.pieces = store, key, list(pieces)
        self.taken: list[Piece] = []

    def claim(self) -> Piece | None:
        """The next piece nobody has taken, or None when the segment's work is all handed out."""
        i = self.store.add(self.key, 1) - 1
        if i >= len(self.pieces):
            return None
        self.taken.append(self.pieces[i])
        return self.pieces[i]


def gather(taken: Sequence[Piece], count: int) -> list[tuple[Piece, int]]:
    """Every rank's (piece, samples consumed) from its claims and committed count; a collective."""
    mine = [(p.shard, p.start, p.stop) for p in taken]
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (mine, count))
    out: list[tuple[Piece, int]] = []
    for pieces, n in everyone:
        out.extend(consumed([Piece(*p) for p in pieces], n))
    return out
