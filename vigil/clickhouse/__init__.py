"""ClickHouse plumbing: the client factory (chdb or server) and numbered migrations."""

from vigil.clickhouse.client import DATABASE, check, connect
from vigil.clickhouse.migrations import MigrationReport, migrate

__all__ = ["DATABASE", "MigrationReport", "check", "connect", "migrate"]
