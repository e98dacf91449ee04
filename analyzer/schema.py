"""The analyzer's ClickHouse schema: its migrations (tables, rollups, views) and their number range.

The analyzer owns every telemetry table it ingests into and the rollups its detectors
read; other components that read them (the dashboard) declare the columns they use and
are checked against this schema by the test suite.
"""

from __future__ import annotations

from pathlib import Path

from vigil.clickhouse.migrations import MigrationSet

MIGRATIONS = MigrationSet(owner="analyzer", directory=Path(__file__).parent / "migrations", ids=range(1, 200))
