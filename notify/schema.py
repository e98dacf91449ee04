"""The notifier's ClickHouse schema: its delivery log / retry queue and its silences, numbers 0300-0399.

The dashboard component owns 0300-0399; the notifier is its only user of them so far.
"""

from __future__ import annotations

from pathlib import Path

from vigil.clickhouse.migrations import MigrationSet

MIGRATIONS = MigrationSet(owner="notify", directory=Path(__file__).parent / "migrations", ids=range(300, 400))
