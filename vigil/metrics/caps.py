"""Bounded label values: a metric never grows a series per job or host past a setting.

`LabelCap` is for counters: the first `limit` distinct values keep their own label for the life
of the process (a counter's series must not change label mid-life); later ones are `other`.
`top` is for gauges, recomputed at each sample: the `limit` values with the most, the rest summed
under `other`.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Mapping

OTHER = "other"


class LabelCap:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        if value in self._kept:
            return value
        with self._lock:
            if len(self._kept) < self.limit and value != OTHER:
                self._kept.add(value)
                return value
        return value if value in self._kept else OTHER


def top(values: Mapping[tuple[str, ...], float], index: int, limit: int) -> dict[tuple[str, ...], float]:
    """`values` (label tuple -> value) with label `index` kept for the `limit` values of it that sum highest
    (ties: by name), every other value of that label folded into `other`."""
    totals: dict[str, float] = defaultdict(float)
    for labels, v in values.items():
        totals[labels[index]] += v
    kept = set(sorted(totals, key=lambda k: (-totals[k], k))[:limit])
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for labels, v in values.items():
        key = labels if labels[index] in kept else (*labels[:index], OTHER, *labels[index + 1:])
        out[key] += v
    return dict(out)
