"""Dynamic sharding: pieces handed out on demand through the job's rendezvous store (DLRover's idea).

Every rank of a segment sees the same list of remaining pieces; a rank that needs work
takes the next one with `store.add(key, 1)`, an atomic counter on the job's TCPStore (the
default process group's store), so each piece goes to exactly one rank and a slower rank
simply takes fewer. `key` is fresh per segment (rank 0 draws it and broadcasts it), so a
restart that reuses torchrun's store never sees an old counter.

Each claim is also recorded in the store (`KEY/<index>` = the claiming rank), so any rank
can rebuild every rank's claims, in claim order, without a collective: the checkpointer may
skip staging on a busy rank, so a `state_dict()` must never wait for the other ranks. In
lockstep every rank has taken the same number of batches when it checkpoints, and a rank's
claims for a batch are recorded before that batch's all-reduce, so what each rank consumed
is `min(batches * batch_size, samples it claimed)` — the same answer on every rank.
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
    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...


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

    def __init__(self, store: Store, key: str, pieces: Sequence[Piece], rank: int) -> None:
        self.store, self.key, self.pieces, self.rank = store, key, list(pieces), rank
        self.taken: list[Piece] = []

    def claim(self) -> Piece | None:
        """The next piece nobody has taken, or None when the segment's work is all handed out."""
        i = self.store.add(self.key, 1) - 1
        if i >= len(self.pieces):
            return None
        self.store.set(f"{self.key}/{i}", str(self.rank))
        self.taken.append(self.pieces[i])
        return self.pieces[i]

    def everyone(self, world_size: int) -> list[list[Piece]]:
        """Every rank's claims so far, in claim order, from the store's records."""
        claimed = min(self.store.add(self.key, 0), len(self.pieces))
        out: list[list[Piece]] = [[] for _ in range(world_size)]
        for i in range(claimed):
            out[int(self.store.get(f"{self.key}/{i}"))].append(self.pieces[i])
        return out


def consumed_by_all(claims: Sequence[Sequence[Piece]], count: int) -> list[tuple[Piece, int]]:
    """(piece, samples consumed) of every claim when every rank has read `count` samples or all it claimed."""
    return [c for share in claims for c in consumed(share, count)]
