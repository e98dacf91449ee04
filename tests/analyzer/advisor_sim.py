"""Simulated job histories whose scaling curve is known: the advisor's test input.

A job ran at each node count of `grid` for `steps` steps (weak scaling: every rank a fixed
number of tokens per step), its throughput following `rate(nodes)` with multiplicative noise
and slow warm-up steps. `knee_of` curves are piecewise: linear up to the knee, then adding
`after` of a node's throughput per node (negative: throughput falls, communication bound).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from vigil.analyzer.advisor.core import StepPoint

TOKENS_PER_RANK = 4096
RANKS_PER_NODE = 2


def knee_of(knee: int, after: float, per_node: float = 50_000.0) -> Callable[[int], float]:
    return lambda n: per_node * (min(n, knee) + after * max(0, n - knee))


def history(rate: Callable[[int], float], grid: Sequence[int], *, steps: int = 30, noise: float = 0.03,
            warmup: int = 3, data_share: float = 0.1, seed: int = 0) -> list[StepPoint]:
    rnd = random.Random(seed)
    out: list[StepPoint] = []
    for n in grid:
        work = float(n * RANKS_PER_NODE * TOKENS_PER_RANK)
        for i in range(steps):
            ms = work / rate(n) * 1000 * rnd.lognormvariate(0, noise) * (3.0 if i < warmup else 1.0)
            out.append(StepPoint(nodes=n, step_ms=ms, work=work, data_ms=ms * data_share))
    return out


CURVES: list[tuple[str, Callable[[int], float], Sequence[int], int, int]] = [
    # (name, rate, node counts run, the knee, one step of the grid)
    ("saturates at 4", knee_of(4, 0.05), range(1, 9), 4, 1),
    ("saturates at 6", knee_of(6, 0.1), range(1, 13), 6, 1),
    ("falls after 5", knee_of(5, -0.2), range(1, 11), 5, 1),
    ("bends to 30 % after 8", knee_of(8, 0.3), range(2, 17, 2), 8, 2),
    ("saturates at 10 on a grid of 2", knee_of(10, 0.0), range(2, 21, 2), 10, 2),
    ("falls after 3, grid of 3", knee_of(3, -0.3), range(3, 16, 3), 3, 3),
]
