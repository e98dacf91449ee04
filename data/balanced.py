"""Balanced steps: a step is a fixed global number of samples, claimed a micro-batch at a time by whoever is free.

In static and dynamic mode every rank reads `batch_size` samples per step; in synchronous
data parallelism the step then waits for the slowest rank, so a rank 30 % slower slows the
whole job 30 %. Here step k of a segment is the samples at positions [k*S, (k+1)*S) of the
segment's remaining work (S = world x batch_size), cut into micro-batches of `micro`
samples; the ranks take micro-batches from the job store's atomic counter
(`store.add(key, m)`, as `dynamic`) while the step has some left, so a slow rank takes
fewer and the others more (DLRover's dynamic sharding within a step). A rank that draws a
micro-batch of a later step keeps it for that step and ends this one. Claims are guided:
a rank takes `m` = 1/(4 x world) of what is left in the step, at least one (when what it
last saw left allows more than one, it first reads the counter: a stale count handed a
late rank a large claim that the others then waited for), so early claims are large and
the last ones, a micro-batch each, keep the step's tail to about half a micro-batch.

Which samples make step k depends only on the state and the world size; only which rank
reads which micro-batch depends on speed. So the epoch's progress after k steps is the
first min(k*S, total) samples of the remaining work: the same on every rank with no
message and no claim record, and the steps' sample sets are reproducible (the losses up to
the order of a float sum). Every rank takes the same number of steps, ceil(total / S); a
rank may get none of a step's micro-batches (weight the gradients by the step's global
sample count). The counter's key must be new for every segment (`dynamic.segment_key`
draws one): a counter used before hands out later steps' claims, and only a claim of an
earlier step can be told apart and raises. A step's micro-batches must all be read before the next step is taken: a
claim left unread would be a sample lost, so taking the next step earlier raises.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from vigil.data import split
from vigil.data.dynamic import Store
from vigil.data.plan import Piece

GUIDE = 4  # a claim takes 1/(GUIDE x world) of the step's claims left (bench/data_dynamic.py: 2 left longer tails)


class BalancedSteps:
    """One rank's steps of a segment: `steps` iterators of micro-batches (lists of pieces), claimed on demand."""

    def __init__(self, store: Store, key: str, pieces: Sequence[Piece], *, world_size: int, step_samples: int,
                 micro: int) -> None:
        if step_samples < 1 or micro < 1 or world_size < 1:
            raise ValueError(f"step of {step_samples} samples in micro-batches of {micro} on {world_size} ranks")
        self.store, self.key, self.pieces, self.world_size = store, key, list(pieces), world_size
        self.step_samples, self.micro = step_samples, micro
        self._at = split.starts(self.pieces)
        self.total = self._at[-1]
        self.per_step = -(-step_samples // micro)  # claims per step (the last of a step may be short)
        self.steps = -(-self.total // step_samples)
        self._held = range(0)  # claims drawn and not read yet (the rest of a guided claim, or a later step's)
        self._seen = 0  # the counter's value when this rank last drew
        self._ended = -1  # the last step read to its end

    def __iter__(self) -> Iterator[Iterator[list[Piece]]]:
        for k in range(self.steps):
            yield self._step(k)
            if self._ended != k:
                raise RuntimeError(f"step {k} was left with micro-batches unread: read every step to its end")

    def _guided(self, left: int) -> int:
        return max(1, left // (GUIDE * self.world_size))

    def _step(self, k: int) -> Iterator[list[Piece]]:
        first = k * self.per_step  # step k's claims: [first, end); the last step's end where the work ends
        end = first + min(self.per_step, -(-(self.total - k * self.step_samples) // self.micro))
        while True:
            if not self._held:
                m = self._guided(end - self._seen)
                if m > 1:  # what this rank saw left is stale: read the counter before a large claim
                    m = self._guided(end - self.store.add(self.key, 0))
                self._seen = self.store.add(self.key, m)
                self._held = range(self._seen - m, self._seen)
            i = self._held[0]
            step, slot = divmod(i, self.per_step)
            if step < k:
                raise RuntimeError(f"claim {i} of step {step} drawn at step {k}: counter {self.key} was used before")
            if i >= end:  # a later step's, or past the epoch's work (the counter only grows): keep it for then
                self._ended = k
                return
            self._held = self._held[1:]
            start = step * self.step_samples + slot * self.micro
            stop = min(start + self.micro, (step + 1) * self.step_samples, self.total)
            yield split.take_at(self.pieces, self._at, start, stop - start)
