"""The one severity scale: its members in order, how two compare, and the same order in SQL.

Every component that ranks, filters or sorts by severity (detectors, incidents, the notifier's routes and
grouping, the dashboard's pages and queries) reads it from here; SQL gets it as an expression built from the
same tuple (`sql_rank`), so Python and ClickHouse cannot disagree on which of two alerts is worse.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

Severity = Literal["info", "warning", "error", "critical"]

SEVERITIES: tuple[Severity, ...] = get_args(Severity)
"""Mildest first: `rank` is the index here."""

WORST_FIRST: tuple[Severity, ...] = tuple(reversed(SEVERITIES))


def rank(severity: str) -> int:
    """0 (info) .. 3 (critical); -1 for anything that is not a severity (it sorts below all)."""
    try:
        return SEVERITIES.index(severity)  # type: ignore[arg-type]
    except ValueError:
        return -1


def of_rank(level: int) -> Severity:
    """The severity at `level`, clamped to the scale."""
    return SEVERITIES[max(0, min(level, len(SEVERITIES) - 1))]


def worst(severities: Iterable[str], default: Severity = "info") -> Severity:
    best = max(severities, key=rank, default=default)
    return of_rank(rank(best)) if rank(best) >= 0 else default


def sql_rank(column: str) -> str:
    """A ClickHouse expression of `column`'s rank: 0 (info) .. 3 (critical), -1 for anything else."""
    members = ", ".join(f"'{s}'" for s in SEVERITIES)
    return f"(indexOf([{members}], {column}) - 1)"
