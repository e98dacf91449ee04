"""Where the live detector loop stands on each job's clock, kept across analyzer restarts.

The live cursor saves a job's position (the last instant it judged) after the alerts of
that turn are on the alerts topic, and loads the positions at start, so a restarted
analyzer judges every instant it missed instead of jumping to the newest data. Saving
after publishing means a crash in between re-judges a few instants: the book, rebuilt
from the topic, publishes nothing new for them (an alert's event id is its fingerprint,
status and instant).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from vigil.analyzer.detect.base import as_utc


class PositionStore(Protocol):
    def load(self) -> dict[str, datetime]: ...

    def save(self, positions: Mapping[str, datetime]) -> None: ...


@dataclass(kw_only=True)
class ClickHousePositions:
    """Positions in `detect_positions` (migration 0131): the newest row per job wins."""

    client: Any

    def load(self) -> dict[str, datetime]:
        rows = self.client.query("SELECT job_id, argMax(position, updated) FROM detect_positions GROUP BY job_id")
        return {str(j): as_utc(p) for j, p in rows.result_rows}

    def save(self, positions: Mapping[str, datetime]) -> None:
        if not positions:
            return
        now = datetime.now(UTC)
        jobs = sorted(positions)
        self.client.insert("detect_positions", [jobs, [positions[j] for j in jobs], [now] * len(jobs)],
                           column_names=["job_id", "position", "updated"], column_oriented=True)


@dataclass(kw_only=True)
class MemoryPositions:
    saved: dict[str, datetime] = field(default_factory=dict)

    def load(self) -> dict[str, datetime]:
        return dict(self.saved)

    def save(self, positions: Mapping[str, datetime]) -> None:
        self.saved.update(positions)
