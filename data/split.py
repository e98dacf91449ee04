"""Static split: the remaining pieces of an epoch dealt over the ranks, and what lockstep batches consumed.

`assign` gives each piece, in the epoch's order, to the rank with the fewest samples so far
(ties to the lower rank): deterministic, so every rank computes every rank's share, and
balanced to within one shard. In lockstep data parallelism every rank takes `batch_size`
samples per step (a rank out of samples takes a short or empty batch), so after `batches`
steps rank r consumed `min(batches * batch_size, len(stream r))` samples: `consumed` turns
that into per-piece counts for `DataState.after`, with no message between ranks.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

from vigil.data.plan import Piece


def assign(pieces: Sequence[Piece], world: int) -> list[list[Piece]]:
    if world < 1:
        raise ValueError(f"world size {world}")
    streams: list[list[Piece]] = [[] for _ in range(world)]
    loads = [(0, r) for r in range(world)]  # a heap: the least loaded rank first, ties to the lower rank
    for piece in pieces:
        load, rank = heapq.heappop(loads)
        streams[rank].append(piece)
        heapq.heappush(loads, (load + len(piece), rank))
    return streams


def steps(streams: Sequence[Sequence[Piece]], batch_size: int) -> int:
    """Batches every rank takes for the longest stream to be read."""
    return max((-(-sum(len(p) for p in s) // batch_size) for s in streams), default=0)


def take(stream: Sequence[Piece], skip: int, n: int) -> list[Piece]:
    """The sub-pieces of `stream` at sample positions [skip, skip + n) (fewer at its end)."""
    out: list[Piece] = []
    for piece in stream:
        if n <= 0:
            break
        if skip >= len(piece):
            skip -= len(piece)
            continue
        start = piece.start + skip
        stop = min(piece.stop, start + n)
        out.append(Piece(piece.shard, start, stop))
        n -= stop - start
        skip = 0
    return out


def starts(stream: Sequence[Piece]) -> list[int]:
    """Where each piece of `stream` starts, in samples from the stream's start (and where the stream ends)."""
    return [0, *accumulate(len(p) for p in stream)]


def take_at(stream: Sequence[Piece], at: Sequence[int], skip: int, n: int) -> list[Piece]:
    """`take(stream, skip, n)` found by bisection in `at = starts(stream)`: no walk from the stream's front.
    Pieces are never empty (a shard has a sample), so `n` samples lie within the `n` pieces from the first."""
    first = max(0, bisect_right(at, skip) - 1)
    return take(stream[first:first + n], skip - at[first], n) if first < len(stream) else []


def consumed(stream: Sequence[Piece], count: int) -> list[tuple[Piece, int]]:
    """(piece, samples consumed from its start) once the first `count` samples of `stream` were read."""
    out: list[tuple[Piece, int]] = []
    for piece in stream:
        n = max(0, min(len(piece), count))
        out.append((piece, n))
        count -= n
    return out


def tiles(sizes: Sequence[int], done: Sequence[tuple[int, int, int]], shares: Sequence[Sequence[Piece]]) -> bool:
    """Whether the samples already read (`done`: (shard, start, stop) ranges) and the pieces dealt in `shares`
    cover every sample of every shard exactly once: no gap (a sample lost), no overlap (a sample repeated)."""
    cover: dict[int, list[tuple[int, int]]] = {}
    for shard, start, stop in done:
        cover.setdefault(shard, []).append((start, stop))
    for share in shares:
        for p in share:
            cover.setdefault(p.shard, []).append((p.start, p.stop))
    if any(not 0 <= s < len(sizes) for s in cover):
        return False
    for shard, size in enumerate(sizes):
        position = 0
        for start, stop in sorted(r for r in cover.get(shard, []) if r[1] > r[0]):
            if start != position:
                return False
            position = stop
        if position != size:
            return False
    return True
