"""The simulated training-health signals of each rank's step: loss, local grad norm, non-finite count, update ratio,
and every `digest_every` steps the replica digest of its parameter shard.

Healthy physics: the job's loss falls from 5 to ~2 (time constant 200 steps) with 0.5 % step-to-step noise; each
rank's loss is the job's within 2 % (its own batch). A rank's local grad norm is the job's (decaying slowly) x its
place's structure (pp and tp coordinates: ranks of one place hold the same shard, so they agree up to batch noise of
3 % in log) x that noise; the update ratio ~1e-3. No rank reports non-finite values.

Faults (faults.py): `grad_drift` one rank's grad norm grows by `magnitude` [0.02] per step from `start` (a GPU
computing wrong, slowly); `nan` one rank's gradients hold non-finite values at step `start` (its norm null, its count
> 0) and, the all-reduce spreading them, every rank's for the `duration` - 1 [0] steps after; `loss_spike` the job's
loss jumps by `magnitude` [1.0] (relative) at `start` and decays back over `duration` [10] steps; `grad_spike` one
rank's grad norm x (1 + `magnitude`) [1.0] for `duration` [5] steps, then back (spike and recover).

Digests: ranks of one place (same pp/tp, different dp) are replicas of one shard, so at a digest step (a multiple of
`digest_every`; 0: none) they report one 63-bit value drawn from (seed, place, step). Faults: `sdc` one rank's
(local_rank=[0]) shard corrupted at `start` (a flipped bit): its digest differs from its replicas' at every digest
step from then on; `sdc_transient` the same, but the job's rollback and replay of the suspect step restore it, so it
differs at the first digest step at or after `start` only.
"""

from __future__ import annotations

import math
import random
from typing import Any

from vigil.analyzer.simulator.faults import Fault
from vigil.analyzer.simulator.layout import Layout

Health = dict[str, Any]  # loss, grad_norm, nonfinite, update_ratio, digest


class HealthModel:
    """`signals(i, faults)` -> one dict of StepTiming health fields per global rank, for step `i`."""

    def __init__(self, layout: Layout, seed: int, digest_every: int = 0) -> None:
        self._lay, self._seed, self._every = layout, seed, digest_every
        self._rng = random.Random(f"health/{seed}")
        coords = [layout.coords(r) for r in range(layout.world_size)]
        places = {(c.pp, c.tp) for c in coords}
        shape = {p: math.exp(self._rng.gauss(0, 0.3)) for p in sorted(places)}
        self._place = [shape[(c.pp, c.tp)] for c in coords]
        self._where = [(c.pp, c.tp) for c in coords]

    def digests(self, i: int, faults: list[Fault]) -> list[int | None]:
        """Each rank's digest at step `i`: None off a digest step; replicas of a place equal unless corrupted."""
        if self._every <= 0 or i % self._every:
            return [None] * self._lay.world_size
        value = {p: random.Random(f"digest/{self._seed}/{p}/{i}").getrandbits(63) for p in sorted(set(self._where))}
        out: list[int | None] = [value[p] for p in self._where]
        for f in faults:
            first_check = -(-f.start // self._every) * self._every  # the first digest step at or after the flip
            if (f.kind == "sdc" and i >= f.start) or (f.kind == "sdc_transient" and i == first_check):
                rank = self._lay.host_index(f.host) * self._lay.gpus_per_host + f.int_option("local_rank", 0)
                out[rank] = int(out[rank] or 0) ^ (1 << (f.int_option("local_rank", 0) + 7))  # one flipped bit
        return out

    def _job_loss(self, i: int, faults: list[Fault]) -> float:
        loss = 2.0 + 3.0 * math.exp(-i / 200) + self._rng.gauss(0, 0.01)
        for f in faults:
            if f.kind == "loss_spike" and f.active(i):
                span = f.duration or 10
                loss *= 1 + f.magnitude * max(0.0, 1 - (i - f.start) / span)
        return loss

    def signals(self, i: int, faults: list[Fault]) -> list[Health]:
        lay, rng = self._lay, self._rng
        g = lay.gpus_per_host
        drift: dict[int, float] = {}
        nan_rank: set[int] = set()
        everyone_nan = False
        for f in faults:
            rank = lay.host_index(f.host) * g + f.int_option("local_rank", 0) if f.host != "all" else -1
            if f.kind == "grad_drift" and i >= f.start:
                drift[rank] = (1 + f.magnitude) ** (i - f.start + 1)
            elif f.kind == "grad_spike" and f.start <= i < f.start + (f.duration or 5):
                drift[rank] = 1 + f.magnitude
            elif f.kind == "nan" and i == f.start:
                nan_rank.add(rank)
            elif f.kind == "nan" and f.start < i < f.start + (f.duration or 1):
                everyone_nan = True
        job_loss = self._job_loss(i, faults)
        base = 1.5 * math.exp(-i / 20000)
        digests = self.digests(i, faults)
        out: list[Health] = []
        for r in range(lay.world_size):
            if everyone_nan or r in nan_rank:
                out.append({"loss": None, "grad_norm": None, "nonfinite": 1 + rng.randrange(1000),
                            "update_ratio": None, "digest": digests[r]})
                continue
            norm = base * self._place[r] * math.exp(rng.gauss(0, 0.03)) * drift.get(r, 1.0)
            out.append({"loss": round(job_loss * (1 + rng.gauss(0, 0.02)), 6), "grad_norm": round(norm, 6),
                        "nonfinite": 0, "update_ratio": round(1e-3 * math.exp(rng.gauss(0, 0.1)), 8),
                        "digest": digests[r]})
        return out
