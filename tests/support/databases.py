"""Test databases: how long their tables keep fixture rows, and the analyzer's schema as an older release left
it."""

from __future__ import annotations

from pathlib import Path

from vigil.clickhouse.migrations import MigrationSet

# Fixtures carry fixed dates: the tables' TTL must not delete them (ClickHouse drops rows past it on its next merge):
# test databases keep ten years. (Not 36500: the TTL date would wrap past DateTime's 2106.)
FIXTURE_TTL_DAYS = 3650


def analyzer_migrations_before(folder: Path, number: int) -> MigrationSet:
    """The analyzer's migrations numbered below `number`, copied into `folder`: a store as an older release left it."""
    from vigil.analyzer import schema

    older = folder / f"before_{number:04d}"
    older.mkdir(exist_ok=True)
    for path in schema.MIGRATIONS.directory.glob("*.sql"):
        if int(path.name[:4]) < number:
            (older / path.name).write_text(path.read_text())
    return MigrationSet(owner="analyzer", directory=older, ids=schema.MIGRATIONS.ids, more=schema.MIGRATIONS.more)
