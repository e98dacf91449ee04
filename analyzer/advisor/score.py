"""Scoring advice: what a recorded curve predicted against what the job measured afterwards.

Pure. An `advice` event records the curve (node count -> throughput) it saw; once a later
generation has run, its measured throughput at the node count it ran at (the count with the
most steps after the advice) is compared with the curve's prediction there (measured, or
interpolated between two measured counts; never extrapolated: no score then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vigil.analyzer.advisor.core import Point


@dataclass(frozen=True, kw_only=True)
class Score:
    """How a recorded prediction fared: the throughput a later generation measured at `nodes`."""

    nodes: int
    predicted: float
    measured: float

    @property
    def error_pct(self) -> float:
        return (self.measured - self.predicted) / self.predicted * 100


def predict(curve_: Mapping[int, float], nodes: int) -> float | None:
    """The throughput a recorded curve predicts at `nodes`: measured, or interpolated between two points."""
    if nodes in curve_:
        return curve_[nodes]
    below = [n for n in curve_ if n < nodes]
    above = [n for n in curve_ if n > nodes]
    if not below or not above:
        return None
    a, b = max(below), min(above)
    return curve_[a] + (curve_[b] - curve_[a]) * (nodes - a) / (b - a)


def score(curve_: Mapping[int, float], later: Sequence[Point]) -> Score | None:
    """Score a recorded curve against what ran after it (the node count with the most steps)."""
    if not later:
        return None
    ran = max(later, key=lambda p: p.steps)
    pred = predict(curve_, ran.nodes)
    if pred is None or pred <= 0:
        return None
    return Score(nodes=ran.nodes, predicted=pred, measured=ran.throughput)
