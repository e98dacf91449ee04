"""What the application is made of: the services `vigil up` can host and the schemas it migrates.

This is the one place that names the components. Adding a service or a component's
tables means adding its spec here; there is no lookup by string, so a service that
cannot be imported fails loudly instead of being skipped.
"""

from __future__ import annotations

from typing import Any

from vigil.analyzer import hosting as analyzer_hosting
from vigil.analyzer import schema as analyzer_schema
from vigil.clickhouse.migrations import MigrationReport, MigrationSet, migrate
from vigil.dashboard import hosting as dashboard_hosting
from vigil.dashboard.settings import DashboardSettings
from vigil.notify import hosting as notify_hosting
from vigil.notify import schema as notify_schema
from vigil.recovery import hosting as recovery_hosting
from vigil.service import ServiceSpec

SERVICES: tuple[ServiceSpec, ...] = (analyzer_hosting.SPEC, recovery_hosting.SPEC, dashboard_hosting.SPEC,
                                     notify_hosting.spec(lambda: DashboardSettings.load().base_url()))
"""In start order; `vigil up --no-<name>` leaves one out."""

MIGRATIONS: tuple[MigrationSet, ...] = (analyzer_schema.MIGRATIONS, notify_schema.MIGRATIONS)


def service(name: str) -> ServiceSpec:
    for spec in SERVICES:
        if spec.name == name:
            return spec
    raise ValueError(f"no service named {name!r}; services: {', '.join(s.name for s in SERVICES)}")


def migrate_all(client: Any, ttl_days: int, *, rebuild: bool = True) -> MigrationReport:
    """Apply every component's pending migrations (idempotent) and bring TTLs to `ttl_days`; `rebuild=False` (a
    service starting beside others) refuses one that rebuilds tables holding rows (`vigil.clickhouse.migrations`)."""
    return migrate(client, MIGRATIONS, {"ttl_days": ttl_days}, rebuild=rebuild)
