"""Numbered, idempotent ClickHouse migrations recorded in a table.

Migrations are `NNNN_name.sql` files in `vigil/migrations/` (ranges: 0001-0099 core
and raw telemetry, 0100-0199 analyzer, 0200-0299 recovery). Statements are split on
`;` at line end and may use `{ttl_days}` style placeholders filled from settings.
Each applied migration is recorded in `vigil_migrations` with a checksum; a changed
file that was already applied is reported, not re-run.

Retention is a setting, not history: after the migrations, every table whose TTL is
`<expr> + INTERVAL n DAY` is brought to the configured `ttl_days` (ALTER ... MODIFY TTL),
so changing `VIGIL_RETENTION_DAYS` and running `vigil migrate` applies it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from clickhouse_connect.driver.client import Client

from vigil.errors import MigrationError

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

LEDGER = """
CREATE TABLE IF NOT EXISTS vigil_migrations (
    id UInt32, name String, checksum String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
) ENGINE = ReplacingMergeTree ORDER BY id
"""


@dataclass(frozen=True, kw_only=True)
class Migration:
    id: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]

    def statements(self, params: dict[str, object]) -> list[str]:
        text = self.sql
        for k, v in params.items():
            text = text.replace("{" + k + "}", str(v))
        return [s.strip() for s in re.split(r";\s*$", text, flags=re.M) if s.strip() and not _only_comments(s)]


def _only_comments(s: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in s.splitlines())


def discover(directory: Path | None = None) -> list[Migration]:
    root = directory if directory is not None else Path(__file__).resolve().parent.parent / "migrations"
    found: list[Migration] = []
    for path in sorted(root.glob("*.sql")):
        m = _NAME.match(path.name)
        if not m:
            raise MigrationError(f"{path}: migration files are named NNNN_lower_snake.sql")
        found.append(Migration(id=int(m.group(1)), name=m.group(2), sql=path.read_text()))
    ids = [m.id for m in found]
    if len(ids) != len(set(ids)):
        raise MigrationError(f"duplicate migration number in {root}")
    return found


@dataclass(frozen=True, kw_only=True)
class MigrationReport:
    applied: list[str]
    already: list[str]
    changed: list[str]
    retention: list[str] = field(default_factory=list)  # tables whose TTL was brought to the setting


_TTL = re.compile(r"\bTTL (.+?) \+ toIntervalDay\((\d+)\)(?= SETTINGS|$)")


def apply_retention(client: Client, days: int) -> list[str]:
    """ALTER every table of the current database whose day-interval TTL differs from `days`."""
    rows = client.query("SELECT name, engine_full FROM system.tables WHERE database = currentDatabase() "
                        "AND engine_full LIKE '%TTL %'").result_rows
    changed = []
    for name, engine in rows:
        m = _TTL.search(str(engine))
        if m is None or int(m.group(2)) == days:
            continue
        try:
            client.command(f"ALTER TABLE `{name}` MODIFY TTL {m.group(1)} + INTERVAL {int(days)} DAY")
        except Exception as exc:
            raise MigrationError(f"retention of {name} to {days} days failed: {str(exc).splitlines()[0][:300]}") from None
        changed.append(f"{name}: {m.group(2)} -> {days} days")
    return changed


def migrate(client: Client, params: dict[str, object] | None = None, directory: Path | None = None) -> MigrationReport:
    """Apply every migration not yet recorded; safe to run any number of times."""
    client.command(LEDGER)
    done = {int(r[0]): str(r[1]) for r in client.query("SELECT id, checksum FROM vigil_migrations FINAL").result_rows}
    applied: list[str] = []
    already: list[str] = []
    changed: list[str] = []
    for mig in discover(directory):
        label = f"{mig.id:04d}_{mig.name}"
        if mig.id in done:
            (changed if done[mig.id] != mig.checksum else already).append(label)
            continue
        for stmt in mig.statements(params or {}):
            try:
                client.command(stmt)
            except Exception as exc:
                raise MigrationError(f"migration {label} failed: {str(exc).splitlines()[0][:300]}") from None
        client.insert("vigil_migrations", [[mig.id, mig.name, mig.checksum]], column_names=["id", "name", "checksum"])
        applied.append(label)
    days = (params or {}).get("ttl_days")
    retention = apply_retention(client, int(str(days))) if days is not None else []
    return MigrationReport(applied=applied, already=already, changed=changed, retention=retention)
